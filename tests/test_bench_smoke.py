"""A smoke run of the benchmarks (``python -m bench --tiny``): every figure comes out.

The bench is not part of the test command otherwise, and nothing here looks at how fast
anything was: only that each figure was measured. On PostgreSQL it runs against a scratch
database named after the test database (created and dropped by the bench), and on SQLite too;
on SQLite alone, the SQLite figures only.
"""

import json
import math
import os
import subprocess
import sys

import pytest
from django.conf import settings

from bench.run import SIZES, specs
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow]


def run_bench(tmp_path, *args: str) -> dict:
    out = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--json", str(out), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "prescient bench, tiny sizes" in proc.stdout
    return json.loads(out.read_text())


def peers_installed() -> bool:
    """Whether the bench can compare with django-tasks-db (the `bench` extra, Django 6)."""
    try:
        import django.tasks  # noqa: F401
        import django_tasks_db  # noqa: F401
    except ImportError:
        return False
    return True


def expected(db: str) -> set[str]:
    keys = {s.key for s in specs(SIZES["tiny"]) if db == "postgresql" or not s.postgres_only}
    return keys if peers_installed() else {k for k in keys if not k.startswith("peers.")}


def assert_every_figure(results: dict, db: str) -> None:
    figures = {row["key"]: row for row in results["figures"] if row["db"] == db}
    assert set(figures) == expected(db)
    for key, row in figures.items():
        assert all(math.isfinite(v) for v in row["runs"]), key
        assert row["median"] >= 0, key
        if row["baseline"]:
            assert row["ratio"] is not None, key
        if row["target"] and db == "postgresql":
            assert row["met"] in (True, False), key


def test_bench_tiny__sqlite_gives_every_sqlite_figure(tmp_path):
    results = run_bench(tmp_path, "--no-postgres")
    assert_every_figure(results, "sqlite")
    assert results["machine"]["cpus"] and results["mode"] == "tiny"


@pytest.mark.postgres
def test_bench_tiny__postgresql_gives_every_figure(tmp_path):
    db = settings.DATABASES["default"]
    url = "postgres://{user}@{host}:{port}/{name}_bench_smoke".format(
        user=db.get("USER") or "postgres", host=db.get("HOST") or "127.0.0.1", port=db.get("PORT") or 5432,
        name=db["NAME"].removeprefix("test_"),
    )
    results = run_bench(tmp_path, "--database-url", url)
    assert_every_figure(results, "postgresql")
    assert_every_figure(results, "sqlite")
    assert results["machine"]["postgresql"]
