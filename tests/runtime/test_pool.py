"""A worker's children run parcels: jobs of one claim started together, run one at a time,
each decision sent back as it is made. A child that dies mid-parcel fails the run in flight and
hands back the rest, which never ran. Real child processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

import prescient
from prescient.engine import store
from prescient.engine.decisions import Decision, TickSummary
from prescient.models import FutureJob, JobHistory
from prescient.runtime.pool import Pool
from prescient.states import Event, Outcome, State
from tests.conftest import database_env
from tests.testapp.models import RunLog, Thing

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TOKEN = "worker:test-pool/1"


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pool]:
    for name, value in database_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.settings")
    children = Pool(1)
    yield children
    children.close()


def claimed(*checks: str, start: bool = False) -> list[FutureJob]:
    """One job per check, due an hour ago, claimed together under ``TOKEN`` (in that order)."""
    now = timezone.now()
    for n, check in enumerate(checks):
        thing = Thing.objects.create(name=f"parcel-{n}")
        due = now - timedelta(hours=1) + timedelta(seconds=n)
        FutureJob.objects.create(
            entity_name="testapp.thing", entity_key=str(thing.pk), job_exec=check,
            first_check_at=due, next_check_at=due, created_at=due,
        )
    jobs = store.claim(now, len(checks), TOKEN, start=start)
    assert [job.job_exec for job in jobs] == list(checks)
    return jobs


def run_parcel(pool: Pool, jobs: list[FutureJob], *, started: bool = False) -> list[Decision]:
    now = timezone.now()
    pool.submit(pool.children[0], jobs, now, started=started)
    decisions: list[Decision] = []
    deadline = time.monotonic() + 30
    while pool.busy and time.monotonic() < deadline:
        decisions.extend(pool.collect(timeout=0.5))
    assert not pool.busy, "the parcel did not finish"
    store.settle(decisions, TOKEN, now, TickSummary())
    return decisions


def test_a_parcel__starts_its_jobs_together_and_runs_each_once_in_order(pool):
    jobs = claimed("test.record", "test.record", "test.record")
    decisions = run_parcel(pool, jobs)
    assert [d.job.pk for d in decisions] == [job.pk for job in jobs]
    assert all(d.ran and d.event == Event.FINISH for d in decisions)
    assert RunLog.objects.count() == 3
    assert set(JobHistory.objects.values_list("outcome", flat=True)) == {Outcome.COMPLETED}
    assert not FutureJob.objects.exists()


def test_a_child_dying_mid_parcel__fails_the_run_in_flight_and_hands_back_the_rest(pool):
    first, crash, after = claimed("test.record", "test.exit", "test.record")
    decisions = run_parcel(pool, [first, crash, after])
    assert [d.job.pk for d in decisions] == [first.pk, crash.pk, after.pk]
    assert (decisions[0].event, decisions[2].event) == (Event.FINISH, Event.HAND_BACK)
    assert decisions[1].ran and decisions[1].event != Event.HAND_BACK  # a failed run, retried
    assert JobHistory.objects.get(job_id=first.pk).outcome == Outcome.COMPLETED
    crashed = FutureJob.objects.get(pk=crash.pk)
    assert crashed.last_error.startswith("ChildDied:") and crashed.failure_count == 1
    untouched = FutureJob.objects.get(pk=after.pk)  # never ran: nothing charged, due again
    assert (untouched.state, untouched.reserved_by, untouched.run_count, untouched.failure_count) == (
        State.SCHEDULED, "", 0, 0
    )
    assert RunLog.objects.filter(entity_key=untouched.entity_key).count() == 0
    assert len(pool.children) == 1 and pool.children[0].process.is_alive(), "the child was replaced"


def test_a_parcel_started_by_its_claim__does_not_run_a_job_killed_or_paused_since(pool):
    kept, killed, paused = claimed("test.record", "test.record", "test.record", start=True)
    assert FutureJob.objects.filter(run_started_at__isnull=True).count() == 0, "the claim started them"
    assert prescient.kill(killed, "not wanted") == "requested"
    assert prescient.pause(job=paused) == 1
    decisions = run_parcel(pool, [kept, killed, paused], started=True)
    assert [d.event for d in decisions] == [Event.FINISH, Event.HAND_BACK, Event.HAND_BACK]
    assert {log.entity_key for log in RunLog.objects.all()} == {kept.entity_key}
    assert JobHistory.objects.get(job_id=killed.pk).outcome == Outcome.KILLED
    row = FutureJob.objects.get(pk=paused.pk)
    assert (row.state, row.last_state, row.run_count, row.failure_count) == (State.PAUSED, State.SCHEDULED, 0, 0)
