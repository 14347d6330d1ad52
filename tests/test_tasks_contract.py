"""django.tasks as Django documents it: the points on which Django's own ``tests/tasks`` and
django-tasks-db's suite, run against the backend, found it wrong (#32 item 3), each through
Django's public API.

``prescient.tick()`` stands in for the worker where the point is how a run ends; real
``prescient_worker`` processes where it is a task while it runs, or a worker beside a task that
misbehaves. docs/tasks.md says how the backend fares on Django's own tests/tasks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("django.tasks")

from tests.conftest import ROOT

# --- backend.check() -------------------------------------------------------------------------


NO_APP_SETTINGS = """
SECRET_KEY = "contract"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TASKS = {"default": {"BACKEND": "prescient.tasks.PrescientBackend"}}
"""


def _without_prescient(tmp_path, *args):
    (tmp_path / "noapp_settings.py").write_text(NO_APP_SETTINGS)
    shop = tmp_path / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "apps.py").write_text(textwrap.dedent("""
        from django.apps import AppConfig

        class ShopConfig(AppConfig):
            name = "shop"

            def ready(self):
                from . import tasks  # noqa: F401 (its tasks are defined at start-up)
    """))
    (shop / "tasks.py").write_text("from django.tasks import task\n\n@task\ndef hello():\n    return 1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, *args], check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def test_check__says_when_prescient_is_not_in_installed_apps(tmp_path):
    done = _without_prescient(tmp_path, "-m", "django", "check", "--settings=noapp_settings")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(prescient.E023) TASKS['default'] is prescient's backend, but 'prescient' is not in INSTALLED_APPS" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_enqueue__without_prescient_installed_raises_improperly_configured(tmp_path):
    code = "import django; django.setup(); from shop.tasks import hello; hello.enqueue()"
    env_settings = f"import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'noapp_settings'; {code}"
    done = _without_prescient(tmp_path, "-c", env_settings)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: TASKS['default'] is prescient's backend")
