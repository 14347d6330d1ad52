"""scripts/cluster-guard, which scripts/run-tests runs around the stages: it fails the run when
the postmaster of PG_URL's cluster changed, or a database not named after PG_URL's appeared.

Real databases, a real sampler in its own process, a real restart (of a throwaway server of the
test's own: tests/pgserver.py). On the cluster the run was given, the guard is pointed at a
database named after the test database (``<test db>_guard_<hex>``), and the wrongly named
database is ``<test db>_stray_<hex>``: wrong for this guard, still named after PG_URL for the
guard of the run around this test.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, database_env
from tests.pgserver import PostgresServer

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

GUARD = [sys.executable, str(ROOT / "scripts" / "cluster-guard")]


class Guard:
    """One guard: ``begin`` at once, a watcher sampling every 0.1 s, ``end`` on demand."""

    def __init__(self, url: str, folder: Path) -> None:
        self.folder = folder
        subprocess.run([*GUARD, "begin", url, str(folder)], check=True, timeout=30)
        self.watcher = subprocess.Popen([*GUARD, "watch", str(folder), "--interval", "0.1"])

    def seen(self) -> set[str]:
        names = set()
        for line in (self.folder / "seen.jsonl").read_text().splitlines():
            try:
                names.add(json.loads(line)["name"])
            except ValueError:  # a line being written
                pass
        return names

    def wait_until_seen(self, *names: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not set(names) <= self.seen():
            assert time.monotonic() < deadline, f"the watcher did not record {names} within {timeout}s"
            time.sleep(0.05)

    def stop_watching(self) -> None:
        if self.watcher.poll() is None:
            self.watcher.send_signal(signal.SIGTERM)
            assert self.watcher.wait(timeout=15) == 0

    def end(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GUARD, "end", str(self.folder)], capture_output=True, text=True, timeout=30, check=False
        )

    def kill(self) -> None:
        if self.watcher.poll() is None:
            self.watcher.kill()
            self.watcher.wait()


def admin(url: str, *statements: str) -> None:
    with psycopg.connect(url.rsplit("/", 1)[0].replace("postgres://", "postgresql://", 1) + "/postgres",
                         autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.fixture
def guards(tmp_path) -> Iterator[list[Guard]]:
    made: list[Guard] = []
    yield made
    for guard in made:
        guard.kill()


@pytest.mark.django_db
def test_cluster_guard__reports_a_database_not_named_after_the_url_and_accepts_one_that_is(guards, tmp_path):
    url = database_env()["DATABASE_URL"]  # the test database on the cluster the run was given
    server, test_db = url.rsplit("/", 1)
    tag = uuid.uuid4().hex[:8]
    own = f"{test_db}_guard_{tag}"
    right, wrong = f"{own}_ok", f"{test_db}_stray_{tag}"
    guard = Guard(f"{server}/{own}", tmp_path / "guard")
    guards.append(guard)
    try:
        admin(url, f'CREATE DATABASE "{right}"', f'CREATE DATABASE "{wrong}"')
        guard.wait_until_seen(right, wrong)
    finally:
        admin(url, f'DROP DATABASE IF EXISTS "{right}" WITH (FORCE)', f'DROP DATABASE IF EXISTS "{wrong}" WITH (FORCE)')
    guard.stop_watching()  # both dropped: only the watcher's samples know them
    result = guard.end()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cluster guard: the postmaster is unchanged (pid " in result.stdout
    assert f"not named after PG_URL's database '{own}' (nor test_{own})" in result.stdout
    stray = [line for line in result.stdout.splitlines() if line.startswith("  - ")]
    assert any(line.startswith(f"  - {wrong} (oid ") for line in stray), result.stdout
    assert not any(right in line for line in stray), result.stdout
    [accepted] = [line for line in result.stdout.splitlines() if f"named after '{own}': " in line]
    assert right in accepted.split(f"'{own}': ", 1)[1].split(", "), result.stdout


def test_cluster_guard__reports_a_restart_and_a_stop_of_the_postmaster(guards, tmp_path):
    with PostgresServer.throwaway() as server:
        guard = Guard(server.url("prescient_guard"), tmp_path / "guard")
        guards.append(guard)
        server.create_database("prescient_guard_a")
        guard.wait_until_seen("prescient_guard_a")
        guard.stop_watching()

        quiet = guard.end()
        assert quiet.returncode == 0, quiet.stdout + quiet.stderr
        pid = server.postmaster_pid()
        assert f"cluster guard: the postmaster is unchanged (pid {pid}, started " in quiet.stdout
        assert "1 database(s) appeared during the run named after 'prescient_guard': prescient_guard_a" in quiet.stdout
        assert "FAILED" not in quiet.stdout

        server.restart()
        restarted = guard.end()
        assert restarted.returncode == 1, restarted.stdout + restarted.stderr
        assert f"FAILED: the postmaster changed during the run: pid {pid} started " in restarted.stdout
        assert f"pid {server.postmaster_pid()} started " in restarted.stdout

        server.stop()
        stopped = guard.end()
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert "FAILED: the cluster of PG_URL does not answer at the end of the run" in stopped.stdout
