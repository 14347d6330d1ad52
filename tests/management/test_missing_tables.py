"""Before ``migrate`` (issue #27, item 1): a prescient command on a database without prescient's
tables says so in one line and exits with status 1, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.conftest import ROOT, database_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

COMMANDS = [
    ["prescient_worker", "--once", "--concurrency", "1"],
    ["prescient_tick"],
    ["prescient_status"],
    ["prescient_prune", "--dry-run"],
    ["prescient_reap"],
    ["prescient_schedules"],
    ["prescient_pause", "--workflow", "w"],
]


@pytest.fixture
def empty_database(tmp_path) -> Iterator[dict[str, str]]:
    """The environment of a process whose database exists but was never migrated. On PostgreSQL,
    a database beside the test database, named after it (``test_<PG_URL's name>_empty_<hex>``):
    ``make test`` makes no database that is not named after PG_URL's (scripts/cluster-guard)."""
    env = database_env()
    if connection.vendor == "postgresql":
        import psycopg

        server, test_database = env["DATABASE_URL"].rsplit("/", 1)
        name = f"{test_database}_empty_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        env["DATABASE_URL"] = f"{server}/{name}"
        try:
            yield env
        finally:
            with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    else:
        env["PRESCIENT_SQLITE"] = str(tmp_path / "never-migrated.sqlite3")
        yield env


@pytest.mark.parametrize("command", COMMANDS, ids=lambda args: args[0])
def test_command__before_migrate__one_line_and_exit_status_1(empty_database, command):
    process = subprocess.run(
        [sys.executable, "-m", "django", *command, "--settings=tests.settings"],
        cwd=ROOT, env=empty_database, capture_output=True, text=True, timeout=60, check=False,
    )
    assert process.returncode == 1, process.stdout + process.stderr
    [line] = process.stderr.strip().splitlines()
    assert re.fullmatch(
        r"CommandError: the prescient tables are missing from database 'default' \((\d+) of \1, "
        r"e\.g\. prescient_\w+\): run python manage\.py migrate",
        line,
    ), line
    assert process.stdout == ""
