"""The release as a user gets it: ``python -m build`` makes an sdist and a wheel, and each,
installed with its dependencies into a fresh virtualenv, takes the tutorial's steps
(docs/tutorial.md) in a new Django project on SQLite.

The build runs on a copy of the checkout's files (tracked and not ignored), so it writes nothing
into the checkout, and ``--no-isolation`` with this virtualenv's own ``build`` and ``setuptools``
(the ``dev`` extra): no build backend is downloaded for it. The wheel is built from the sdist, as
``python -m build`` does, so a file the sdist leaves out is missing from the wheel too. Installing
needs the package index (or pip's cache, or the local index pip is configured with) for the
dependencies, and for the sdist's build backend. Nothing here uses the suite's database: the
tests run in the SQLite stages (a Python each), not again beside them on PostgreSQL.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import prescient

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="builds and installs prescient, using no database of the suite's: runs in the SQLite stages",
    ),
]

#: The tutorial's models, which it uses without showing them (``Order.Status.SHIPPED``, ``Notification``).
MODELS = '''
from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        NEW = "new"
        SHIPPED = "shipped"

    customer = models.CharField(max_length=100)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.NEW)


class Notification(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE)
    kind = models.CharField(max_length=50)
    message = models.TextField()
'''


def run(args: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120,
        expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == expect, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def checkout_files() -> list[str]:
    """The checkout's files as a release is built from them: tracked, and new ones not ignored."""
    listed = run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT).stdout
    return sorted({name for name in listed.split("\0") if name and (ROOT / name).is_file()})


def python_block(text: str, marker: str) -> str:
    """The one ```python block of the tutorial that contains ``marker``."""
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.M | re.S) if marker in b]
    assert len(blocks) == 1, f"docs/tutorial.md has one python block with {marker!r}"
    return blocks[0]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built by ``python -m build`` from a copy of the checkout."""
    pytest.importorskip("build", reason="`build` is in the dev extra: run `make setup`")
    source = tmp_path_factory.mktemp("source")
    for name in checkout_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source], cwd=source)
    return out


def test_build__an_sdist_and_a_wheel_named_for_the_version_holding_every_file_of_the_package(dist):
    version = prescient.__version__
    assert sorted(p.name for p in dist.iterdir()) == [
        f"prescient-{version}-py3-none-any.whl", f"prescient-{version}.tar.gz",
    ]
    package = [name for name in checkout_files() if name.startswith("prescient/")]
    assert "prescient/migrations/0001_initial.py" in package and "prescient/py.typed" in package
    assert any(name.startswith("prescient/templates/") for name in package)

    with zipfile.ZipFile(dist / f"prescient-{version}-py3-none-any.whl") as wheel:
        in_wheel = set(wheel.namelist())
        metadata = wheel.read(f"prescient-{version}.dist-info/METADATA").decode()
    assert sorted(set(package) - in_wheel) == []
    assert f"\nVersion: {version}\n" in metadata

    with tarfile.open(dist / f"prescient-{version}.tar.gz") as sdist:
        in_sdist = {name.removeprefix(f"prescient-{version}/") for name in sdist.getnames()}
    assert sorted({*package, "pyproject.toml", "README.md"} - in_sdist) == []


@pytest.mark.parametrize("artefact", ["wheel", "sdist"])
def test_install__into_a_fresh_virtualenv_then_the_tutorials_steps(artefact, dist, tmp_path):
    version = prescient.__version__
    built = dist / (f"prescient-{version}-py3-none-any.whl" if artefact == "wheel" else f"prescient-{version}.tar.gz")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    # The checkout and this test session stay out of it: no settings module, database or path of theirs.
    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV", "PRESCIENT_SQLITE")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    # 1. Install it (the tutorial installs from a checkout; here from what a release publishes).
    run([python, "-m", "pip", "install", "-q", built], cwd=tmp_path, env=env, timeout=300)
    says = "import importlib.metadata as m, prescient as p; print(p.__version__, m.version('prescient'), p.__file__)"
    found = run([python, "-c", says], cwd=tmp_path, env=env).stdout.split()
    assert found[:2] == [version, version]
    installed = Path(found[2]).parent
    assert installed.is_relative_to(venv), "the installed copy, not the checkout's"
    for name in (
        "templates/prescient/admin/dashboard.html", "static/prescient/dashboard.js", "migrations/0001_initial.py",
        "py.typed",
    ):
        assert (installed / name).is_file(), f"{name} is installed"
    shipped = {p.name for p in (installed / "migrations").glob("0*.py")}
    assert shipped == {p.name for p in (ROOT / "prescient" / "migrations").glob("0*.py")}

    # A project and an app, as the tutorial assumes one.
    project = tmp_path / "project"
    project.mkdir()
    run([python, "-m", "django", "startproject", "mysite", "."], cwd=project, env=env)
    run([python, "manage.py", "startapp", "shop"], cwd=project, env=env)
    (project / "shop" / "models.py").write_text(MODELS)

    # 2. Settings (the tutorial's blocks, added to the project's own) and the API's URLs.
    tutorial = TUTORIAL.read_text(encoding="utf-8")
    apps = python_block(tutorial, '"prescient",').replace("INSTALLED_APPS = [", "INSTALLED_APPS = [*INSTALLED_APPS,", 1)
    sqlite = python_block(tutorial, '"transaction_mode": "IMMEDIATE"')
    settings = project / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + f"\n{apps}\nINSTALLED_APPS += ['shop']\n{sqlite}")
    urls = project / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + '\nfrom django.urls import include\n\n'
                    'urlpatterns += [path("prescient/", include("prescient.urls"))]\n')

    manage = [python, "manage.py"]
    before = run([*manage, "prescient_tick"], cwd=project, env=env, expect=1)
    assert "migrate" in before.stderr, "before migrate, a command says to run it"
    run([*manage, "makemigrations", "shop"], cwd=project, env=env)
    run([*manage, "migrate"], cwd=project, env=env)
    assert "System check identified no issues" in run([*manage, "check"], cwd=project, env=env).stdout

    # 3. The tutorial's check, in the app's prescient_checks.py.
    (project / "shop" / "prescient_checks.py").write_text(python_block(tutorial, "# shop/prescient_checks.py"))

    # 4. Schedule it and cancel it, as the tutorial does; then schedule it again, to run.
    step4 = python_block(tutorial, "prescient.cancel(order")
    script = (f"from shop.models import Order\n{step4}\nassert not Order.objects.get().notification_set.exists()\n"
              "job = prescient.schedule(order, 'shop.unshipped', delay=timedelta(hours=3))\n"
              "print(job.next_check_at.isoformat())\n")
    due = run([*manage, "shell", "-v", "0", "-c", script], cwd=project, env=env).stdout.strip().splitlines()[-1]

    # 5. Run what is due: a tick at the job's time runs the check, which asks to look again.
    run([*manage, "prescient_tick", "--now", due], cwd=project, env=env)
    after = ("from shop.models import Notification; from prescient.models import FutureJob\n"
             "job = FutureJob.objects.get()\n"
             "print(Notification.objects.count(), job.state, job.check_count)\n")
    ran = run([*manage, "shell", "-v", "0", "-c", after], cwd=project, env=env).stdout.split()
    assert ran == ["1", "scheduled", "1"]

    # 6. Watch it: the status command, and the admin's pages from the installed templates.
    assert "scheduled=1" in run([*manage, "prescient_status"], cwd=project, env=env).stdout
    admin = ("from django.contrib.auth.models import User; from django.test import Client\n"
             "from prescient.models import FutureJob\n"
             "client = Client(HTTP_HOST='localhost')\n"
             "client.force_login(User.objects.create_superuser('admin', 'admin@example.com', 'pw'))\n"
             "job = FutureJob.objects.get()\n"
             "for url in ('/admin/prescient/futurejob/', f'/admin/prescient/futurejob/{job.pk}/change/'):\n"
             "    page = client.get(url)\n"
             "    print(page.status_code, b'shop.unshipped' in page.content)\n")
    assert run([*manage, "shell", "-v", "0", "-c", admin], cwd=project, env=env).stdout.split() == ["200", "True"] * 2
