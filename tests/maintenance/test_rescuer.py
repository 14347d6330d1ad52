"""The rescuer (prescient.maintenance.rescuer): stale claims reclaimed, buried or ended."""

from __future__ import annotations

from datetime import timedelta

import pytest

from prescient.clock import db_now
from prescient.maintenance.rescuer import Rescuer
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State

pytestmark = pytest.mark.django_db

STALE = timedelta(seconds=61 + 60)  # past the default stale period (timeout 60 s + 60 s)


def claimed(make_job, thing, t0, token, state=State.RUNNING, **fields):
    """A started run whose lease went stale by the database's clock."""
    return make_job(thing=thing, state=state, reserved_by=token, reserved_at=db_now() - STALE, **fields)


def test_run_once__reclaims_a_lost_workers_claim_and_buries_a_dead_ticks(make_job, make_thing, t0):
    worker_job = claimed(make_job, make_thing(name="w"), t0, "worker:host:1/1")
    tick_job = claimed(make_job, make_thing(name="t"), t0, "tick:1:abc")
    assert Rescuer().run_once(t0) == 2
    worker_job.refresh_from_db()
    tick_job.refresh_from_db()
    assert (worker_job.state, worker_job.reserved_by, worker_job.failure_count) == (State.SCHEDULED, "", 1)
    assert "worker lost" in worker_job.last_error
    assert (tick_job.state, tick_job.reserved_by) == (State.BURIED, "")


def test_run_once__leaves_fresh_claims_alone(make_job, make_thing, t0, clock):
    fresh = clock - timedelta(seconds=5)  # fresh by the database's clock, whatever ``now`` says
    job = make_job(thing=make_thing(), state=State.RUNNING, reserved_by="worker:x/1", reserved_at=fresh)
    assert Rescuer().run_once(t0) == 0
    job.refresh_from_db()
    assert job.state == State.RUNNING and job.reserved_by == "worker:x/1"


def test_run_once__a_claim_lost_too_often_ends_failed_with_one_history_row(make_job, make_thing, t0, settings):
    settings.PRESCIENT = {"MAX_RETRIES": 0}
    job = claimed(make_job, make_thing(), t0, "worker:host:1/1")
    assert Rescuer().run_once(t0) == 1
    assert not FutureJob.objects.filter(pk=job.pk).exists()
    row = JobHistory.objects.get(job_id=job.pk)
    assert row.outcome == Outcome.FAILED and "worker lost" in row.last_error


def test_run_once__a_job_killed_during_its_lost_run_ends_killed(make_job, make_thing, t0):
    job = claimed(make_job, make_thing(), t0, "worker:host:1/1", end_requested=Outcome.KILLED, end_reason="stop")
    Rescuer().run_once(t0)
    row = JobHistory.objects.get(job_id=job.pk)
    assert (row.outcome, row.reason) == (Outcome.KILLED, "stop")


def test_is_due__only_when_the_survey_saw_a_stale_claim():
    from prescient.engine.sweep import Survey

    assert Rescuer().is_due(Survey(due=False, stale=True))
    assert not Rescuer().is_due(Survey(due=True, stale=False))


def test_run_once__a_check_with_a_120_s_timeout_under_default_settings_is_not_stale_mid_run(
    register, make_job, make_thing, t0, clock
):
    """Default settings: the stale period is 120 s (timeout 60 s + 60 s). A check of its own
    with a timeout of 120 s, its lease last renewed 150 s ago, is still within its own lease
    (its timeout + 60 s); at 181 s it is stale."""
    register("test.long", lambda thing, job: None, timeout_seconds=120)
    job = make_job("test.long", thing=make_thing(), state=State.RUNNING, reserved_by="tick:1:alive",
                   reserved_at=clock - timedelta(seconds=150))
    assert Rescuer().run_once(t0) == 0
    FutureJob.objects.filter(pk=job.pk).update(reserved_at=clock - timedelta(seconds=181))
    assert Rescuer().run_once(t0) == 1
    assert FutureJob.objects.get(pk=job.pk).state == State.BURIED


def test_run_once__a_stale_claim_that_never_started_is_handed_back_uncharged(make_job, make_thing, t0):
    job = claimed(make_job, make_thing(), t0, "worker:host:1/1", run_started_at=None)
    assert Rescuer().run_once(t0) == 1
    job.refresh_from_db()
    assert (job.state, job.reserved_by, job.failure_count, job.last_error) == (State.SCHEDULED, "", 0, "")


def test_a_ticks_summary__counts_reclaimed_handed_back_and_buried_apart(make_job, make_thing, t0):
    """#28 item 6: a tick's summary said ``buried=3`` for these three; it says what happened to
    each, with the words of docs/states.md, and none of it is counted as processed."""
    import prescient

    claimed(make_job, make_thing(name="w"), t0, "worker:host:1/1", next_check_at=t0 + timedelta(days=1))
    claimed(make_job, make_thing(name="r"), t0, "worker:host:1/2", run_started_at=None, state=State.RESERVED,
            next_check_at=t0 + timedelta(days=1))
    claimed(make_job, make_thing(name="t"), t0, "tick:1:abc")
    summary = prescient.tick(t0)
    assert (summary.counts["reclaimed"], summary.counts["handed_back"], summary.counts["buried"]) == (1, 1, 1)
    assert summary.processed == 0
    assert " buried=1 " in summary.line() and " reclaimed=1 handed_back=1" in summary.line()
