"""Smoke runs of the benchmarks: ``make bench-quick`` itself, and ``--tiny`` for the rest.

The test command runs ``make bench-quick``'s command (``python -m bench --quick``, PostgreSQL
and SQLite) among the slow PostgreSQL tests, and ``python -m bench --tiny`` over the sections quick
leaves out (herd, churn, workflows, recurring, prune, peers), so every figure of ``make bench``
is measured once per test run. Nothing here looks at how fast anything was: only that each
figure was measured, with its baseline and target where it has them. On PostgreSQL the bench
runs against a scratch database named after the test database (created and dropped by the
bench); on SQLite alone, the SQLite figures only (tiny sizes, every section).
"""

import json
import math
import os
import re
import subprocess
import sys

import pytest
from django.conf import settings

from bench.run import ALL_SECTIONS, QUICK_SECTIONS, QUICK_SQLITE_SECTIONS, SIZES, section, specs
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow]

#: What ``--quick`` leaves out: the tiny run covers these, so that every figure comes out.
NOT_QUICK = tuple(s for s in ALL_SECTIONS if s not in QUICK_SECTIONS)


def run_bench(tmp_path, mode: str, *args: str) -> dict:
    out = tmp_path / f"results-{mode}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", f"--{mode}", "--json", str(out), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"prescient bench, {mode} sizes" in proc.stdout
    return json.loads(out.read_text())


def scratch_url() -> str:
    """A scratch database beside the test database (the bench creates and drops it)."""
    db = settings.DATABASES["default"]
    return "postgres://{user}@{host}:{port}/{name}_bench_smoke".format(
        user=db.get("USER") or "postgres", host=db.get("HOST") or "127.0.0.1", port=db.get("PORT") or 5432,
        name=db["NAME"].removeprefix("test_"),
    )


def peers_installed() -> bool:
    """Whether the bench can compare with django-tasks-db (the `bench` extra, Django 6)."""
    try:
        import django.tasks  # noqa: F401
        import django_tasks_db  # noqa: F401
    except ImportError:
        return False
    return True


def tasks_installed() -> bool:
    """Whether django.tasks is there (Django 6), so that the bench can enqueue tasks."""
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        return False
    return True


def expected(mode: str, db: str, sections: tuple[str, ...]) -> set[str]:
    keys = {s.key for s in specs(SIZES[mode])
            if section(s.key) in sections and (db == "postgresql" or not s.postgres_only)}
    if not tasks_installed():  # no django.tasks (Django 5.2): nothing to enqueue
        keys = {k for k in keys if "enqueue" not in k}
    return keys if peers_installed() else {k for k in keys if not k.startswith("peers.")}


#: The load section's WAL of the scratch database alone: read back from the server's pg_wal with
#: pg_waldump, which a shared cluster may recycle before it is read (bench/load.py says so).
MAY_BE_MISSING = re.compile(r"load\.wal\.(\d+|tick|bulk|schedule)$")


def assert_every_figure(results: dict, db: str, sections: tuple[str, ...]) -> None:
    figures = {row["key"]: row for row in results["figures"] if row["db"] == db}
    wanted = expected(results["mode"], db, sections)
    assert {k for k in wanted if not MAY_BE_MISSING.match(k)} <= set(figures) <= wanted
    for key, row in figures.items():
        assert all(math.isfinite(v) for v in row["runs"]), key
        assert row["median"] >= 0, key
        if row["baseline"] and section(row["baseline"]) in sections:  # a baseline measured in this run
            assert row["ratio"] is not None, key
        if row["target"] and (db == "postgresql" or row.get("own_target")):  # SQLite: its own targets
            assert row["met"] in (True, False), key


def test_bench_tiny__sqlite_gives_every_sqlite_figure(tmp_path):
    results = run_bench(tmp_path, "tiny", "--no-postgres")
    assert_every_figure(results, "sqlite", ALL_SECTIONS)
    assert results["machine"]["cpus"] and results["mode"] == "tiny"


def test_every_figure_and_baseline_belongs_to_a_section():
    """What the smoke runs expect is chosen by section: a figure of no known section would
    silently drop out of every run's expected set."""
    for mode in ("tiny", "quick", "full"):
        for spec in specs(SIZES[mode]):
            assert section(spec.key) in ALL_SECTIONS, spec.key
            assert spec.baseline is None or section(spec.baseline) in ALL_SECTIONS, spec.baseline


def test_make_bench_quick_runs_the_command_this_smoke_test_runs():
    """The smoke test below runs what ``make bench-quick`` runs, not a look-alike."""
    recipe = re.search(r"^bench-quick:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe and recipe.group(1).strip() == "$(VENV)/bin/python -m bench --quick"


@pytest.mark.postgres
def test_bench_quick__gives_every_quick_figure_on_both_databases(tmp_path):
    results = run_bench(tmp_path, "quick", "--database-url", scratch_url())
    assert_every_figure(results, "postgresql", QUICK_SECTIONS)
    assert_every_figure(results, "sqlite", QUICK_SQLITE_SECTIONS)
    assert results["machine"]["postgresql"]


@pytest.mark.postgres
def test_bench_tiny__postgresql_gives_every_figure_quick_leaves_out(tmp_path):
    results = run_bench(tmp_path, "tiny", "--database-url", scratch_url(), "--no-sqlite", "--only", ",".join(NOT_QUICK))
    assert_every_figure(results, "postgresql", NOT_QUICK)


def test_sqlite_rows__are_judged_by_sqlites_own_targets():
    from bench.run import summarise, target_text

    values = {"raw.claim_idle": [1e-5], "idle.due_query": [6e-5], "raw.sweep": [100_000.0], "sweep.tick": [5_000.0],
              "idle.claim": [3e-4]}
    rows = {row["key"]: row for row in summarise("sqlite", values, SIZES["tiny"])}
    assert rows["idle.due_query"]["target"] == ["<=", 5.0, "ratio"]
    assert rows["idle.due_query"]["met"] is False  # 6x the raw query
    assert target_text(rows["idle.due_query"]) == "<= 5x raw"
    assert rows["sweep.tick"]["met"] is True  # 0.05x the raw sweep, against 0.03x
    assert rows["idle.claim"]["met"] is None and target_text(rows["idle.claim"]) == ""
