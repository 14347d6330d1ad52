"""Reads off the primary against a real streaming replica (#36 item 4; docs/operations.md, "Reads
off the primary"): a throwaway primary and its hot standby, each in a temporary folder on its own
port (tests/pgserver.py), never the cluster the tests were given. The pages are read in processes
of their own (tests/replica_probe.py) whose settings have both aliases and READ_DATABASE naming
the replica. Both servers are stopped and deleted at the end, whatever happens."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.pgserver import PostgresServer, free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

DATABASE = "prescient_replica_test"
#: The primary's own: streaming to one standby (these are PostgreSQL's defaults, said here).
PRIMARY_CONF = {"wal_level": "replica", "max_wal_senders": "5"}


@contextlib.contextmanager
def standby_of(primary: PostgresServer) -> Iterator[PostgresServer]:
    """A hot standby of ``primary`` by ``pg_basebackup -R`` (streaming, over a replication
    connection that initdb's trust entries of pg_hba.conf allow on 127.0.0.1), started on its
    own port; stopped and deleted when the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="prescient-pg-replica-"))
    replica = PostgresServer(folder, primary.bindir, free_port(), primary.owner)
    try:
        if replica.owner:
            shutil.chown(folder, user=replica.owner, group=pwd.getpwnam(replica.owner).pw_gid)
        replica.run_as_owner([
            primary.bindir / "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", replica.data, "-R", "-X", "stream", "--no-sync",
        ], timeout=300)
        with open(replica.data / "postgresql.conf", "a") as f:  # the copy of the primary's, on its own port
            f.write(f"\n# the replica (tests/test_replica.py)\nport = {replica.port}\nhot_standby = on\n")
        replica.start()
        yield replica
    finally:
        replica.destroy()


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_pages_read_the_replica_and_say_as_of_when_it_lags_while_writes_and_claims_use_the_primary():
    with PostgresServer.throwaway(PRIMARY_CONF) as primary:
        url = primary.create_database(DATABASE)
        env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PRESCIENT_TEST_SETTINGS")}
        env.update(DATABASE_URL=url, PYTHONPATH=str(ROOT))

        def run(*args: str, replica_url: str | None = None) -> str:
            done = subprocess.run(
                [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                env={**env, **({"PRESCIENT_TEST_REPLICA_URL": replica_url} if replica_url else {})},
            )
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        run("-m", "django", "migrate", "-v", "0", "--settings=tests.settings")
        with standby_of(primary) as replica:
            replica_url = replica.url(DATABASE)

            def probe(*args: str) -> dict[str, Any]:
                result: dict[str, Any] = json.loads(run("-m", "tests.replica_probe", *args, replica_url=replica_url))
                return result

            def on_replica(sql: str) -> Any:
                return replica.query(DATABASE, sql)[0][0]

            assert on_replica("SELECT pg_is_in_recovery()") is True
            first = probe("schedule")["id"]
            wait_until(lambda: on_replica(f"SELECT count(*) FROM prescient_futurejob WHERE id = {first}") == 1,
                       30, "the first job on the replica")
            seen = probe("pages")
            assert seen["list_ids"] == [first] and seen["api_ids"] == [first]
            assert seen["dashboard_total"] == 1 and seen["status_scheduled"] == 1
            assert not seen["list_as_of"] and not seen["dashboard_as_of"]
            assert seen["api_as_of"] is None and seen["status_as_of"] is None

            # Replay paused: what the primary writes now is received, not shown.
            on_replica("SELECT pg_wal_replay_pause()")
            wait_until(lambda: on_replica("SELECT pg_get_wal_replay_pause_state()") == "paused", 30, "replay paused")
            second = probe("schedule")["id"]
            assert primary.query(DATABASE, "SELECT count(*) FROM prescient_futurejob")[0][0] == 2
            time.sleep(6)  # the last replay is now older than AS_OF_AFTER_SECONDS (5)
            seen = probe("pages")
            assert seen["list_ids"] == [first] and seen["api_ids"] == [first], seen  # read on the replica
            assert seen["dashboard_total"] == 1 and seen["status_scheduled"] == 1, seen
            assert seen["list_as_of"] and seen["dashboard_as_of"], seen
            assert seen["api_as_of"] and seen["status_as_of"], seen

            # Writes and claims go to the primary while the replica is read-only and behind.
            acted = probe("act", str(second))
            assert acted["action_status"] == 302 and acted["paused"] == "paused", acted
            assert acted["release_status"] == 200 and acted["released"] == "scheduled", acted
            assert acted["ran"] == "completed", acted

            # Replay resumed: the replica catches up, and the pages say nothing more.
            on_replica("SELECT pg_wal_replay_resume()")
            wait_until(lambda: on_replica("SELECT count(*) FROM prescient_jobhistory") >= 2, 30, "replay caught up")
            seen = probe("pages")
            assert seen["list_ids"] == [] and seen["api_ids"] == [], seen  # both jobs ran (the tick above)
            assert not seen["list_as_of"] and not seen["dashboard_as_of"], seen
            assert seen["api_as_of"] is None and seen["status_as_of"] is None, seen
