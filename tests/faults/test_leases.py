"""Lease renewal never deadlocks with the settles of the same rows (issue #32, item 6).

A worker's heartbeat renews every claim whose token starts with the worker's prefix while its
children settle their parcels; the renewal was one UPDATE over those rows in no set order and
deadlocked once against a settle. Here two "workers" (a process renewing like the heartbeat,
two processes claiming and settling like children: tests/faults/lease_churn.py) turn 6,000
rows over for 40 seconds, each through prescient's own store functions. The renewal in no set
order deadlocked here within seconds (it fails this test every time).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from prescient.engine.sweep import WORKER_TOKEN_PREFIX
from prescient.models import FutureJob
from prescient.states import State
from tests.conftest import ROOT, database_env

from .conftest import seed

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROWS = 6000
SECONDS = 40  # from the first process's start to the last one's stop


def deadlocks_so_far() -> int:
    """PostgreSQL's count of deadlocks detected in this database (pg_stat_database)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_two_workers_renewing_leases_while_their_children_settle__no_deadlock(tmp_path: Path):
    seed(ROWS, "test.record")  # its code never runs: the processes settle without running it
    before = deadlocks_so_far()
    roles = []
    for worker in (1, 2):
        prefix = f"{WORKER_TOKEN_PREFIX}lease-test-{worker}"
        roles += [["renew", prefix], ["settle", prefix, "1"], ["settle", prefix, "2"]]
    until = time.time() + SECONDS
    procs: list[tuple[list[str], subprocess.Popen[bytes], Path]] = []
    try:
        for n, role in enumerate(roles):
            out = tmp_path / f"p{n}.out"
            with out.open("wb") as sink:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.faults.lease_churn", *role, str(until)],
                    cwd=ROOT, env=database_env(), stdout=sink, stderr=subprocess.STDOUT,
                )
            procs.append((role, proc, out))
        for role, proc, out in procs:
            assert proc.wait(timeout=max(1.0, until + 30 - time.time())) == 0, f"{role}:\n{out.read_text()}"
    finally:
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    outputs = {" ".join(role): out.read_text() for role, _, out in procs}
    said = "\n".join(outputs.values())
    assert "deadlock" not in said.lower(), said
    counts = {name: json.loads(text.strip().splitlines()[-1]) for name, text in outputs.items()}
    assert all(c["errors"] == 0 for c in counts.values()), said
    renewers = [c for name, c in counts.items() if name.startswith("renew")]
    settlers = [c for name, c in counts.items() if name.startswith("settle")]
    # The renewals met the settles: each heartbeat renewed a thousand rows and more at once.
    assert all(c["passes"] >= 20 and c["most"] >= 1000 for c in renewers), counts
    # Every row went round, and no result was thrown away (a lost lease).
    settled = sum(c["rows"] for c in settlers)
    rescheduled = sum(c.get("rescheduled", 0) for c in settlers)
    assert settled >= ROWS, counts
    assert sum(c.get("discarded", 0) for c in settlers) == 0, counts
    assert rescheduled + sum(c.get("handed_back", 0) for c in settlers) == settled, counts

    jobs = FutureJob.objects.all()
    assert jobs.count() == ROWS
    assert set(jobs.values_list("state", "reserved_by").distinct()) == {(State.SCHEDULED, "")}
    totals = jobs.aggregate(runs=Sum("run_count"), checks=Sum("check_count"))
    assert totals == {"runs": rescheduled, "checks": rescheduled}
    time.sleep(1)  # the processes' statistics reach pg_stat_database as they exit
    assert deadlocks_so_far() == before
