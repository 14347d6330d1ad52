"""One path through the store (#25 item 1): the store's moves, its one job constructor, the
rescuer settling stale claims in batches with the retry policy of any failed run, and failures
kept as data (the exception's class path and traceback) from the run to the history row."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import prescient
from prescient.clock import db_now
from prescient.engine import store
from prescient.exceptions import InvalidTransition
from prescient.maintenance.rescuer import rescue
from prescient.models import FutureJob, JobHistory
from prescient.states import Event, Outcome, State

pytestmark = pytest.mark.django_db

STALE = timedelta(hours=1)


def give_up(job, check, now):
    """An error handler that never retries."""
    job.end_reason = "this handler never retries"
    return None


# --- the store's moves -----------------------------------------------------------------------


def test_move__a_release_of_a_reserved_job_leaves_its_claim_be(make_job, clock):
    job = make_job(state=State.RESERVED, reserved_by="tick:1:x", reserved_at=clock)
    assert store.move(job, Event.RELEASE) is False
    job.refresh_from_db()
    assert (job.state, job.reserved_by) == (State.RESERVED, "tick:1:x")


def test_move__an_ending_event_is_refused_and_the_table_is_asked(make_job):
    job = make_job(state=State.BURIED)
    with pytest.raises(InvalidTransition):
        store.move(job, Event.KILL)
    with pytest.raises(InvalidTransition):
        store.move(job, Event.PAUSE)  # (buried, pause) is absent from the table
    assert store.preview(job, Event.KILL) == "(end)"
    assert FutureJob.objects.get(pk=job.pk).state == State.BURIED


def test_move__refuse_in_flight_refuses_a_sleep_of_a_running_job(make_job, clock, t0):
    job = make_job(state=State.RUNNING, reserved_by="tick:1:x", reserved_at=clock)
    with pytest.raises(InvalidTransition, match="in flight"):
        store.move(job, Event.SLEEP, due=t0 + timedelta(hours=1), refuse_in_flight=True)
    assert FutureJob.objects.get(pk=job.pk).sleep_until is None


# --- one constructor ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paused", "waiting", "state", "last_state"),
    [
        (False, False, State.SCHEDULED, ""),
        (True, False, State.PAUSED, State.SCHEDULED),
        (False, True, State.WAITING, ""),
        (True, True, State.WAITING, ""),  # a job with parents waits, paused workflow or not
    ],
)
def test_new_job__decides_its_first_state(t0, paused, waiting, state, last_state):
    job = store.new_job(entity_name="a.b", entity_key="1", job_exec="c", due=t0, now=t0, paused=paused,
                        waiting=waiting)
    assert (job.state, job.last_state, job.first_check_at, job.next_check_at, job.kind) == (
        state, last_state, t0, t0, "check"
    )


# --- the rescuer through settle ------------------------------------------------------------------


def test_rescue__a_lost_workers_claim_is_judged_by_the_configured_retry_policy(make_job, settings, t0):
    """The old rescuer counted only MAX_RETRIES: a handler that gives up was not asked."""
    settings.PRESCIENT = {"ERROR_HANDLER": "tests.engine.test_one_path.give_up", "MAX_RETRIES": 5}
    job = make_job(state=State.RUNNING, reserved_by="worker:host:1/1", reserved_at=db_now() - STALE)
    assert rescue(t0) == {"ended": 1}
    row = JobHistory.objects.get(job_id=job.pk)
    assert (row.outcome, row.reason, row.failure_count) == (Outcome.FAILED, "this handler never retries", 1)
    assert (row.exception_class_path, row.traceback) == ("prescient.exceptions.RunFailed", "")


def test_rescue__settles_a_batch_of_stale_claims_in_a_few_statements(make_job, make_thing, t0):
    """Twenty dead ticks' claims under one token: one UPDATE of the live table, not twenty."""
    for i in range(20):
        make_job(thing=make_thing(name=f"t{i}"), state=State.RUNNING, reserved_by="tick:1:dead",
                 reserved_at=db_now() - STALE)
    with CaptureQueriesContext(connection) as queries:
        assert rescue(t0) == {"buried": 20}
    updates = [q["sql"] for q in queries if re.search(r"\bUPDATE\s+\"?prescient_futurejob\b", q["sql"], re.IGNORECASE)]
    assert len(updates) == 1, updates
    assert FutureJob.objects.filter(state=State.BURIED, reserved_by="").count() == 20


# --- failures as data -----------------------------------------------------------------------------


def test_a_raising_check__keeps_its_exception_class_and_traceback_in_its_history_row(
    register, make_thing, t0, settings
):
    settings.PRESCIENT = {"MAX_RETRIES": 0}

    def broken(thing, job):
        raise ValueError("no good")

    register("test.broken", broken)
    job = prescient.schedule(make_thing(), "test.broken", now=t0)
    prescient.tick(t0)
    row = JobHistory.objects.get(job_id=job.pk)
    assert (row.outcome, row.last_error) == (Outcome.FAILED, "ValueError: no good")
    assert row.exception_class_path == "builtins.ValueError"
    assert row.traceback.startswith("Traceback") and "in broken" in row.traceback


def test_a_bad_result__is_recorded_as_the_type_error_it_names(register, make_thing, t0, settings):
    settings.PRESCIENT = {"MAX_RETRIES": 0}
    register("test.wrong", lambda thing, job: "not a time")
    job = prescient.schedule(make_thing(), "test.wrong", now=t0)
    prescient.tick(t0)
    row = JobHistory.objects.get(job_id=job.pk)
    assert (row.exception_class_path, row.traceback) == ("builtins.TypeError", "")


def test_a_timed_out_task__keeps_the_class_the_runner_recorded_not_one_read_from_its_text(t0):
    """An error recorded with its class is read as that class, whatever its text says (the old
    reader guessed CheckTimeout from an error text starting so)."""
    pytest.importorskip("django.tasks")
    from prescient.kinds.task_results import task_errors

    [error] = task_errors([{"at": t0.isoformat(), "error": "CheckTimeout: said by a ValueError",
                            "exception_class_path": "builtins.ValueError", "traceback": "tb"}])
    assert (error.exception_class_path, error.traceback) == ("builtins.ValueError", "tb")
    [old] = task_errors([{"at": t0.isoformat(), "error": "CheckTimeout: an entry without its class"}])
    assert old.exception_class_path == "prescient.exceptions.RunFailed"
