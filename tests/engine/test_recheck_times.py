"""Re-check times are deterministic: a returned timedelta (and a built-in retry policy's wait)
counts from the slot being processed, the boundary at or before the tick's ``now``, never from
how late in that slot the tick started. Returned datetimes are kept as they are, rounded up.

Each test ticks a second (or most of a slot) after a boundary, as cron does; the tests at exact
boundaries elsewhere (tests/runtime/test_tick.py, tests/test_states.py) keep their figures.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import prescient
from prescient import slots
from prescient.models import FutureJob, JobHistory
from prescient.retries import error_rate
from prescient.states import Outcome, State

pytestmark = pytest.mark.django_db

SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)


@pytest.fixture(params=[1, 15], ids=["1-minute slots", "15-minute slots"])
def slot(request, settings):
    """The slot length of the test, in the settings: 1 and 15 minutes."""
    settings.PRESCIENT = {**settings.PRESCIENT, "SLOT_MINUTES": request.param}
    return timedelta(minutes=request.param)


def recheck(register, make_thing, t0, returns, at):
    """Schedule a check returning ``returns`` at ``t0``, tick at ``at``; the job's row after."""
    register("test.returns", lambda thing, job: returns)
    prescient.schedule(make_thing(), "test.returns", now=t0)
    summary = prescient.tick(at)
    assert summary.counts["rescheduled"] == 1, summary.line()
    return FutureJob.objects.get()


def test_an_hour_asked_a_second_after_the_boundary__is_due_an_hour_after_the_slot(register, make_thing, t0, slot):
    job = recheck(register, make_thing, t0, HOUR, t0 + SECOND)
    assert job.next_check_at == t0 + HOUR  # 11:00, not 11:00 plus a slot


def test_an_hour_asked_at_the_boundary__is_due_an_hour_later(register, make_thing, t0, slot):
    assert recheck(register, make_thing, t0, HOUR, t0).next_check_at == t0 + HOUR


def test_an_hour_asked_late_in_the_slot__still_counts_from_its_start(register, make_thing, t0, slot):
    late = t0 + slot - SECOND  # the last second of the slot
    assert recheck(register, make_thing, t0, HOUR, late).next_check_at == t0 + HOUR


def test_two_minutes__is_every_two_minutes_with_one_minute_slots(register, make_thing, t0, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "SLOT_MINUTES": 1}
    register("test.every_two", lambda thing, job: timedelta(minutes=2))
    prescient.schedule(make_thing(), "test.every_two", now=t0)
    due = t0
    seen = []
    for _ in range(4):
        prescient.tick(due + SECOND)  # each tick a second late, as cron's
        due = FutureJob.objects.get().next_check_at
        seen.append(due - t0)
    assert seen == [timedelta(minutes=m) for m in (2, 4, 6, 8)]


def test_a_delay_shorter_than_the_lateness__is_due_the_next_slot(register, make_thing, t0, slot):
    # Counted from the slot's start, 0 (or a second) would be in the past: it lands strictly
    # after the slot being processed, as before.
    assert recheck(register, make_thing, t0, timedelta(0), t0 + 2 * SECOND).next_check_at == t0 + slot
    FutureJob.objects.all().delete()
    assert recheck(register, make_thing, t0, SECOND, t0 + 2 * SECOND).next_check_at == t0 + slot


def test_a_delay_off_the_boundaries__rounds_up(register, make_thing, t0, slot):
    job = recheck(register, make_thing, t0, HOUR + SECOND, t0 + SECOND)
    assert job.next_check_at == t0 + HOUR + slot


def test_a_returned_datetime__is_kept_as_it_is_and_rounded_up(register, make_thing, t0, slot):
    job = recheck(register, make_thing, t0, t0 + SECOND + HOUR, t0 + SECOND)
    assert job.next_check_at == t0 + HOUR + slot  # the datetime is not moved to the slot's start
    FutureJob.objects.all().delete()
    assert recheck(register, make_thing, t0, t0 + HOUR, t0 + SECOND).next_check_at == t0 + HOUR


def test_a_negative_delay__is_still_outside_the_horizon(register, make_thing, t0, slot):
    register("test.negative", lambda thing, job: -SECOND)
    prescient.schedule(make_thing(), "test.negative", now=t0)
    prescient.tick(t0 + 2 * SECOND)
    row = JobHistory.objects.get()
    assert row.outcome == Outcome.HORIZON


def test_a_horizon_outcome__keeps_the_time_asked_for_and_why(register, make_thing, t0, slot):
    """#28 item 7: the time and the reason were only logged; the history row keeps both."""
    register("test.past", lambda thing, job: t0 - HOUR)
    register("test.far", lambda thing, job: timedelta(days=3), horizon_days=2.5)
    prescient.schedule(make_thing(), "test.past", now=t0)
    prescient.schedule(make_thing(), "test.far", now=t0)
    prescient.tick(t0 + SECOND)
    past, far = JobHistory.objects.get(job_exec="test.past"), JobHistory.objects.get(job_exec="test.far")
    assert (past.outcome, past.asked_check_at) == (Outcome.HORIZON, t0 - HOUR)
    assert past.reason == (
        f"the check asked for its next check at {(t0 - HOUR).isoformat()}, before now ({(t0 + SECOND).isoformat()})"
    )
    assert (far.outcome, far.asked_check_at) == (Outcome.HORIZON, t0 + timedelta(days=3))  # from the slot
    assert far.reason == (
        f"the check asked for its next check at {(t0 + timedelta(days=3)).isoformat()}, beyond its horizon of 2.5 days"
    )


def test_other_outcomes__keep_no_time_asked_for(register, make_thing, t0, slot):
    register("test.done", lambda thing, job: None)
    prescient.schedule(make_thing(), "test.done", now=t0)
    prescient.tick(t0)
    row = JobHistory.objects.get()
    assert (row.outcome, row.asked_check_at, row.reason) == (Outcome.COMPLETED, None, "")


def test_the_horizon__is_judged_on_the_delay(register, make_thing, t0, slot):
    register("test.far", lambda thing, job: timedelta(days=2), horizon_days=2)
    prescient.schedule(make_thing(), "test.far", now=t0)
    prescient.tick(t0 + SECOND)
    assert FutureJob.objects.get().next_check_at == t0 + timedelta(days=2)


# --- retries --------------------------------------------------------------------------------------


def test_exponential_backoff__counts_its_slots_from_the_slot_being_processed(settings, register, make_thing, t0, slot):
    settings.PRESCIENT = {**settings.PRESCIENT, "ERROR_HANDLER": "prescient.retries.exponential_backoff",
                          "MAX_RETRIES": 3}
    register("test.boom", lambda thing, job: 1 / 0)
    prescient.schedule(make_thing(), "test.boom", now=t0)
    due, waits = t0, []
    for _ in range(3):
        prescient.tick(due + SECOND)
        job = FutureJob.objects.get()
        assert job.state == State.SCHEDULED
        waits.append(job.next_check_at - due)
        due = job.next_check_at
    assert waits == [slot, 2 * slot, 4 * slot]  # not one slot more each, for the second's lateness


def test_error_rate__counts_retry_after_from_the_slot_being_processed(register, make_thing, t0, slot):
    register("test.boom", lambda thing, job: 1 / 0, error_handler=error_rate(retry_after=timedelta(minutes=30)),
             max_retries=0)
    prescient.schedule(make_thing(), "test.boom", now=t0)
    prescient.tick(t0 + SECOND)
    assert FutureJob.objects.get().next_check_at == t0 + timedelta(minutes=30)


def test_the_default_retry__is_the_next_slot(failing_check, make_thing, t0, slot):
    prescient.schedule(make_thing(), failing_check, now=t0)
    prescient.tick(t0 + slot - SECOND)
    assert FutureJob.objects.get().next_check_at == t0 + slot


@pytest.fixture
def failing_check(register):
    register("test.boom", lambda thing, job: 1 / 0)
    return "test.boom"


def test_a_tasks_retry__stays_relative_to_the_real_now(t0, slot):
    # Tasks are not slotted: a task's retry is due RETRY_DELAY_SECONDS (0 in the tests) after
    # its run, so a failed task is tried again within the same slot.
    pytest.importorskip("django.tasks")
    from tests.tasksapp import tasks

    result = tasks.boom.enqueue("no")
    FutureJob.objects.filter(pk=int(result.id)).update(next_check_at=t0, first_check_at=t0)
    now = t0 + 2 * SECOND
    prescient.tick(now)
    job = FutureJob.objects.get(pk=int(result.id))
    assert job.failure_count == 1
    assert now < job.next_check_at < slots.next_after(now, int(slot.total_seconds() // 60))


# --- the rule itself --------------------------------------------------------------------------------


@pytest.mark.parametrize("minutes", [1, 15, 60])
def test_after_slot__counts_from_the_boundary_at_or_before_now(t0, minutes):
    slot = timedelta(minutes=minutes)
    for late in (timedelta(0), SECOND, slot - SECOND):
        assert slots.after_slot(HOUR, t0 + late, minutes) == t0 + HOUR
        assert slots.after_slot(timedelta(0), t0 + late, minutes) == t0 + slot
    assert slots.after_slot(slot, t0 + slot + SECOND, minutes) == t0 + 2 * slot
