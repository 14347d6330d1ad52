"""Runs start in groups: one statement starts the next few claimed jobs (their leases and
``run_started_at`` by the database's clock), skipping any paused, killed or taken away since
the claim (taken back while ``reserved``); the pacer sizes the groups to about GROUP_SECONDS of work."""

from __future__ import annotations

import pytest

import prescient
from prescient.engine import store, sweep
from prescient.engine.decisions import Decision, TickSummary
from prescient.models import FutureJob, JobHistory
from prescient.states import Event, Outcome, State
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(transaction=True)


def test_start_runs__starts_the_claimed_jobs_in_one_statement_and_skips_those_stopped_since(
    make_job, t0, clock, django_assert_max_num_queries
):
    jobs = [make_job(next_check_at=t0) for _ in range(4)]
    claimed = store.claim(t0, 10, "tick:test")
    assert [j.pk for j in claimed] == [j.pk for j in jobs]
    assert not FutureJob.objects.exclude(run_started_at=None).exists(), "a claim alone starts nothing"
    assert prescient.kill(claimed[1], "no") == "ended"  # reserved: its code never runs, ended at once
    assert prescient.pause(job=claimed[2]) == 1  # reserved: taken back, paused remembering scheduled
    FutureJob.objects.filter(pk=claimed[3].pk).update(reserved_by="tick:another")  # taken away
    with django_assert_max_num_queries(2):  # SQLite without RETURNING: the update and a read
        started = store.start_runs(claimed, "tick:test")
    assert started == {claimed[0].pk}
    row = FutureJob.objects.get(pk=claimed[0].pk)
    assert row.run_started_at is not None and row.run_started_at == row.reserved_at
    assert abs((row.run_started_at - clock).total_seconds()) < 60
    assert FutureJob.objects.exclude(run_started_at=None).count() == 1


def test_claim_with_start__stamps_the_runs_as_started(make_job, t0):
    make_job(next_check_at=t0)
    (job,) = store.claim(t0, 10, "worker:w/1", start=True)
    row = FutureJob.objects.get(pk=job.pk)
    assert (row.state, row.reserved_by) == (State.RUNNING, "worker:w/1")
    assert row.run_started_at is not None and row.run_started_at == row.reserved_at
    assert store.start_runs([job], "worker:w/1") == set(), "a started run is not started twice"


def test_a_tick_batch__starts_in_groups_and_a_job_paused_after_its_group_started_still_not_before(
    register, make_thing, t0
):
    """The first group of a batch is one job; a pause that lands while it runs stops the later
    jobs of the batch, which start in a later group."""
    seen: list[int] = []

    def pause_the_rest(thing, job):
        seen.append(job.pk)
        if len(seen) == 1:
            prescient.pause(job=FutureJob.objects.get(pk=later.pk))

    register("test.pauser", pause_the_rest)
    first = prescient.schedule(make_thing(), "test.pauser", at=t0)
    later = prescient.schedule(make_thing(), "test.pauser", at=t0)
    summary = TickSummary()
    assert sweep.sweep_batch(t0, 10, summary) == 2
    assert seen == [first.pk]
    row = FutureJob.objects.get(pk=later.pk)
    assert (row.state, row.last_state, row.run_count) == (State.PAUSED, State.SCHEDULED, 0)
    assert JobHistory.objects.get(job_id=first.pk).outcome == Outcome.COMPLETED


def _ran(seconds: float) -> Decision:
    return Decision(job=FutureJob(), event=Event.FINISH, seconds=seconds, ran=True)


def test_pacer__begins_with_one_and_at_most_doubles_what_has_run():
    pacer = sweep.Pacer(budget=0.1)
    assert pacer.size(100) == 1
    pacer.record(_ran(0.0001))
    assert pacer.size(100) == 2
    for _ in range(3):
        pacer.record(_ran(0.0001))
    assert pacer.size(100) == 8
    for _ in range(100):
        pacer.record(_ran(0.0001))
    assert pacer.size(100) == 100 and pacer.size(30) == 30


def test_pacer__slow_runs_make_groups_of_one_and_unstarted_jobs_say_nothing():
    pacer = sweep.Pacer(budget=0.1)
    for _ in range(20):
        pacer.record(_ran(0.5))
    assert pacer.size(100) == 1
    for _ in range(20):
        pacer.record(Decision(job=FutureJob(), event=Event.HAND_BACK))
    assert pacer.size(100) == 1
    for _ in range(40):
        pacer.record(_ran(0.01))  # the average follows the runs: about ten runs of 10 ms
    assert 5 <= pacer.size(100) <= 10


def test_a_tick__runs_every_job_once_whatever_the_groups(register, make_thing, t0):
    def count(thing, job):
        RunLog.objects.create(check_name="count", entity_key=str(thing.pk), pid=0, started=0.0)

    register("test.count", count)
    for _ in range(57):
        prescient.schedule(make_thing(), "test.count", at=t0)
    summary = prescient.tick(t0, batch_size=20)
    assert summary.processed == 57
    assert RunLog.objects.count() == 57 and RunLog.objects.values("entity_key").distinct().count() == 57
