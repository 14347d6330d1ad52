"""A worker's children claim, run and settle for themselves; the pool only watches them. A child
that dies mid-parcel has the run in flight charged and the rest of its claim handed back, which
never ran; a child stuck past its run's timeout is killed the same way. Real child processes,
on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from prescient.clock import db_now
from prescient.engine import store
from prescient.engine.decisions import TickSummary
from prescient.models import FutureJob, JobHistory
from prescient.runtime.pool import Pool
from prescient.states import Outcome, State
from tests.conftest import database_env
from tests.testapp.models import RunLog, Thing

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TOKEN = "worker:test-pool"


@pytest.fixture
def make_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Pool]]:
    for name, value in database_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.settings")
    made: list[Pool] = []

    def make(size: int = 1) -> Pool:
        pool = Pool(size, token=TOKEN, batch_size=100)
        made.append(pool)
        return pool

    yield make  # type: ignore[misc]
    for pool in made:
        pool.abandon()


def seed(*checks: str) -> list[FutureJob]:
    """One job per check, due an hour ago, oldest first in that order."""
    now = timezone.now()
    jobs = []
    for n, check in enumerate(checks):
        thing = Thing.objects.create(name=f"parcel-{n}")
        due = now - timedelta(hours=1) + timedelta(seconds=n)
        jobs.append(FutureJob.objects.create(
            entity_name="testapp.thing", entity_key=str(thing.pk), job_exec=check,
            first_check_at=due, next_check_at=due, created_at=due,
        ))
    return jobs


def supervise(pool: Pool, until_idle: bool = True, seconds: float = 60) -> Counter[str]:
    """Run the worker's part until every child is idle; what the children counted."""
    counts: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pool.wait(0.2)
        counts.update(pool.read())
        for token, decisions in pool.check(db_now):
            store.settle(decisions, token, db_now(), TickSummary())
        if until_idle and pool.all_idle:
            return counts
    assert not until_idle, "the children did not go idle"
    return counts


def test_a_child__claims_runs_and_settles_for_itself(make_pool):
    jobs = seed("test.record", "test.record", "test.record")
    pool = make_pool()
    counts = supervise(pool)
    assert counts[Outcome.COMPLETED] == 3
    assert RunLog.objects.count() == 3
    assert set(JobHistory.objects.values_list("job_id", flat=True)) == {job.pk for job in jobs}
    assert not FutureJob.objects.exists()


def test_a_child_dying_mid_parcel__fails_the_run_in_flight_and_hands_back_the_rest(make_pool):
    # A fresh child's parcels grow 1, 2, …: the first holds ``first``, the second both others.
    first, crash, after = seed("test.record", "test.exit", "test.record")
    pool = make_pool()
    original = pool.children[0].process
    supervise(pool, until_idle=False, seconds=3)
    assert JobHistory.objects.get(job_id=first.pk).outcome == Outcome.COMPLETED
    crashed = FutureJob.objects.get(pk=crash.pk)
    assert crashed.last_error.startswith("ChildDied:") and crashed.failure_count == 1
    assert RunLog.objects.filter(entity_key=str(after.entity_key)).count() <= 1
    assert not FutureJob.objects.exclude(reserved_by="").filter(reserved_by__startswith=f"{TOKEN}/1/").exists()
    assert len(pool.children) == 1 and pool.children[0].process is not original, "the child was replaced"
    assert pool.children[0].process.is_alive()


def test_a_child_stuck_past_its_runs_timeout__is_killed_charged_and_replaced(make_pool, settings):
    (stuck,) = seed("test.unstoppable")
    pool = make_pool()
    original = pool.children[0].process
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not FutureJob.objects.filter(pk=stuck.pk, failure_count=1).exists():
        pool.wait(0.2)
        pool.read()
        for token, decisions in pool.check(db_now):
            store.settle(decisions, token, db_now(), TickSummary())
    row = FutureJob.objects.get(pk=stuck.pk)
    assert row.failure_count == 1 and row.last_error.startswith("CheckTimeout")
    assert (row.state, row.reserved_by) == (State.SCHEDULED, "")
    assert not original.is_alive() and pool.children[0].process.is_alive()
