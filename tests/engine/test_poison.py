"""Whatever a job's code does, the tick goes on (issue #32, item 1): anything it raises
(``SystemExit`` and ``KeyboardInterrupt`` included) is a failed run charged to that job, with
its class and traceback; an error handler that raises or answers nonsense fails the job with a
reason naming it; ``raise prescient.Release`` hands the job back uncharged. In process, on SQLite
and PostgreSQL (tests/faults/test_poison.py has the same with real workers and ticks)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import override_settings

import prescient
from prescient.engine import sweep
from prescient.engine.decisions import CHILD_DIED, crashes_in_a_row
from prescient.exceptions import ChildDied
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State

pytestmark = pytest.mark.django_db

SLOT = timedelta(minutes=15)


class Poison(BaseException):
    """A BaseException of the host's own, neither Exception nor one Python knows."""


def raiser(exc: BaseException):
    def check(thing, job):
        raise exc

    return check


@pytest.fixture
def batch_mates(register, make_thing, t0):
    """Three ordinary jobs due beside the poison; returns the list their runs append to."""
    ran: list[int] = []
    register("test.mate", lambda thing, job: ran.append(thing.pk))
    for _ in range(3):
        prescient.schedule(make_thing(), "test.mate", now=t0)
    return ran


@pytest.mark.parametrize(
    ("exc", "path"),
    [
        (SystemExit(2), "builtins.SystemExit"),
        (SystemExit(), "builtins.SystemExit"),
        (KeyboardInterrupt(), "builtins.KeyboardInterrupt"),
        (GeneratorExit(), "builtins.GeneratorExit"),
        (Poison("mine"), "tests.engine.test_poison.Poison"),
    ],
    ids=["exit-2", "exit", "keyboard-interrupt", "generator-exit", "own-base-exception"],
)
def test_a_check_raising_a_base_exception__is_a_failed_run_and_the_tick_runs_the_rest(
    register, make_thing, t0, batch_mates, exc, path
):
    register("test.poison", raiser(exc), max_retries=0)
    thing = make_thing()
    prescient.schedule(thing, "test.poison", now=t0)
    summary = prescient.tick(t0)  # returns: the exception did not escape
    assert len(batch_mates) == 3
    assert summary.counts["completed"] == 3 and summary.counts["failed"] == 1
    row = JobHistory.objects.get(job_exec="test.poison")
    assert (row.outcome, row.run_count, row.failure_count) == (Outcome.FAILED, 1, 1)
    assert row.exception_class_path == path
    assert "Traceback (most recent call last)" in row.traceback and "raise exc" in row.traceback
    assert row.last_error.startswith(type(exc).__name__)
    assert not FutureJob.objects.exists()


def test_a_check_raising_system_exit__with_retries_left_is_retried_not_handed_back(register, make_thing, t0):
    register("test.poison", raiser(SystemExit(1)))
    prescient.schedule(make_thing(), "test.poison", now=t0)
    assert prescient.tick(t0).counts["retried"] == 1
    job = FutureJob.objects.get()
    assert (job.state, job.failure_count, job.run_count, job.next_check_at) == (State.SCHEDULED, 1, 1, t0 + SLOT)
    assert job.recent_errors[-1]["exception_class_path"] == "builtins.SystemExit"
    assert "a failed run; the process goes on" in job.last_error


def test_an_expectation_handler_raising_system_exit__is_retried_at_its_rung(declare, make_thing, t0):
    def handler(thing, job, step):
        raise SystemExit(3)

    declare("test.expect", handler=handler)
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=t0)
    rung = t0 + timedelta(hours=3)
    summary = prescient.tick(rung)
    assert summary.counts["retried"] == 1
    job = FutureJob.objects.get()
    assert (job.failure_count, job.payload["step"]) == (1, 0)  # not climbed: retried at this rung
    assert job.recent_errors[-1]["exception_class_path"] == "builtins.SystemExit"


def test_a_receiver_of_expectation_missed_raising_keyboard_interrupt__fails_that_run_only(
    declare, make_thing, t0
):
    from prescient.signals import expectation_missed

    def receiver(**kwargs):
        raise KeyboardInterrupt

    declare("test.expect")
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=t0)
    expectation_missed.connect(receiver, dispatch_uid="poison")
    try:
        summary = prescient.tick(t0 + timedelta(hours=3))
    finally:
        expectation_missed.disconnect(dispatch_uid="poison")
    assert summary.counts["retried"] == 1
    assert FutureJob.objects.get().recent_errors[-1]["exception_class_path"] == "builtins.KeyboardInterrupt"


# --- error handlers ----------------------------------------------------------------------------


def _raising_handler(job, check, now):
    raise RuntimeError("handler bug")


def _exiting_handler(job, check, now):
    raise SystemExit(4)


def _naive_handler(job, check, now):
    return datetime(2030, 1, 1, 12, 0)


def _text_handler(job, check, now):
    return "tomorrow"


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        (_raising_handler, "raised RuntimeError: handler bug"),
        (_exiting_handler, "raised SystemExit: 4"),
        (_naive_handler, "returned a naive datetime (2030-01-01T12:00:00); it must return an aware datetime or None"),
        (_text_handler, "returned str ('tomorrow'); it must return an aware datetime or None"),
    ],
    ids=["raises", "exits", "naive", "text"],
)
def test_an_error_handler_that_raises_or_answers_nonsense__fails_the_job_naming_it(
    register, make_thing, t0, batch_mates, handler, reason
):
    register("test.poison", raiser(ValueError("boom")), error_handler=handler)
    prescient.schedule(make_thing(), "test.poison", now=t0)
    summary = prescient.tick(t0)
    assert len(batch_mates) == 3 and summary.counts["failed"] == 1
    row = JobHistory.objects.get(job_exec="test.poison")
    assert row.outcome == Outcome.FAILED
    assert handler.__name__ in row.reason and "'test.poison'" in row.reason, row.reason
    assert row.reason.endswith(reason), row.reason
    assert row.exception_class_path == "builtins.ValueError"  # the run's failure, kept as data


def test_an_unimportable_error_handler_setting__fails_the_job_saying_so(register, make_thing, t0, batch_mates):
    register("test.poison", raiser(ValueError("boom")))
    prescient.schedule(make_thing(), "test.poison", now=t0)
    with override_settings(PRESCIENT={"ERROR_HANDLER": "tests.nowhere.handler"}):
        summary = prescient.tick(t0)
    assert len(batch_mates) == 3 and summary.counts["failed"] == 1
    row = JobHistory.objects.get(job_exec="test.poison")
    assert row.reason.startswith("ERROR_HANDLER 'tests.nowhere.handler' cannot be imported"), row.reason


def test_an_error_handler_taking_exception__receives_the_exception_itself(register, make_thing, t0):
    seen: list[BaseException | None] = []

    def handler(job, check, now, exception=None):
        seen.append(exception)
        return None if isinstance(exception, ConnectionError) else now + SLOT

    network = ConnectionError("network down")
    register("test.poison", raiser(network), error_handler=handler)
    prescient.schedule(make_thing(), "test.poison", now=t0)
    prescient.tick(t0)
    assert seen == [network]  # the object itself, not 'ConnectionError: network down'
    assert JobHistory.objects.get().outcome == Outcome.FAILED


def test_an_error_handler_without_exception__is_called_as_before(register, make_thing, t0):
    calls = []

    def handler(job, check, now):
        calls.append((job.failure_count, check.name))
        return now + SLOT

    register("test.poison", raiser(ValueError("x")), error_handler=handler)
    prescient.schedule(make_thing(), "test.poison", now=t0)
    prescient.tick(t0)
    assert calls == [(1, "test.poison")]


def test_the_built_in_handlers__accept_the_exception(register, make_thing, t0):
    from prescient import retries

    job = FutureJob(failure_count=1)
    for handler in (retries.retry_next_slot, retries.exponential_backoff, retries.error_rate()):
        assert retries.call_handler(handler, job, None, t0, ValueError("x")) == t0 + SLOT


# --- Release -----------------------------------------------------------------------------------


def test_raise_release__hands_the_job_back_uncharged_due_at_the_next_slot(register, make_thing, t0):
    register("test.release", raiser(prescient.Release("the carrier is down")))
    job = prescient.schedule(make_thing(), "test.release", now=t0)
    summary = prescient.tick(t0)
    assert summary.counts["handed_back"] == 1
    job.refresh_from_db()
    assert (job.state, job.next_check_at) == (State.SCHEDULED, t0 + SLOT)
    assert (job.run_count, job.failure_count, job.check_count, job.last_error) == (0, 0, 0, "")


def test_raise_release_from_an_expectation_handler__hands_back_at_its_rung(declare, make_thing, t0):
    def handler(thing, job, step):
        raise prescient.Release()

    declare("test.expect", handler=handler)
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=t0)
    rung = t0 + timedelta(hours=3)
    assert prescient.tick(rung).counts["handed_back"] == 1
    job = FutureJob.objects.get()
    assert (job.failure_count, job.payload["step"], job.next_check_at) == (0, 0, rung + SLOT)


# --- what loads a batch ------------------------------------------------------------------------


def test_loading_the_entities_raising_system_exit__fails_those_jobs_and_the_tick_returns(
    register, make_thing, t0, monkeypatch
):
    from prescient.kinds import checks as check_kind

    def broken(jobs):
        raise SystemExit("a manager of the host's")

    register("test.mate", lambda thing, job: None, max_retries=0)
    prescient.schedule(make_thing(), "test.mate", now=t0)
    monkeypatch.setattr(check_kind, "load_entities", broken)
    summary = prescient.tick(t0)
    assert summary.counts["failed"] == 1
    row = JobHistory.objects.get()
    assert (row.outcome, row.exception_class_path, row.run_count) == (
        Outcome.FAILED, "builtins.SystemExit", 0
    )
    assert "a manager of the host's" in row.last_error


# --- runs that end their process ---------------------------------------------------------------


def _claim(job: FutureJob, t0: datetime) -> FutureJob:
    from prescient.engine import store

    [claimed] = store.claim(t0, 1, f"worker:test/{job.run_count}", start=True)
    return claimed


@pytest.mark.parametrize("limit", [1, 3])
def test_runs_ending_their_process_max_crashes_times_in_a_row__bury_the_job(register, make_thing, t0, limit):
    from prescient.engine import store
    from prescient.engine.decisions import TickSummary

    register("test.crash", lambda thing, job: None, error_handler=lambda job, check, now: now)
    job = prescient.schedule(make_thing(), "test.crash", now=t0)
    with override_settings(PRESCIENT={"MAX_CRASHES": limit, "HISTORY_RETENTION_DAYS": None}):
        for run in range(1, limit + 1):
            claimed = _claim(job, t0)
            decision = sweep.failed_run(claimed, ChildDied("its process exited with code 1"), t0, 0.1)
            store.settle([decision], claimed.reserved_by, t0, TickSummary())
            job.refresh_from_db()
            assert job.run_count == run
            assert job.state == (State.BURIED if run == limit else State.SCHEDULED)
    assert crashes_in_a_row(job) == limit
    assert job.last_error.endswith(f"ended their process {limit} times in a row (MAX_CRASHES): buried")
    assert job.recent_errors[-1]["exception_class_path"] == CHILD_DIED


def test_a_run_that_returned_between_two_crashes__breaks_the_row(register, make_thing, t0):
    job = FutureJob(run_count=3, recent_errors=[
        {"at": t0.isoformat(), "error": "ChildDied: x", "exception_class_path": CHILD_DIED, "run": 1},
        {"at": t0.isoformat(), "error": "ChildDied: x", "exception_class_path": CHILD_DIED, "run": 3},
    ])
    assert crashes_in_a_row(job) == 1  # run 2 returned: not in a row
    job.recent_errors.append({"at": t0.isoformat(), "error": "ValueError: x",
                              "exception_class_path": "builtins.ValueError", "run": 4})
    assert crashes_in_a_row(job) == 0
    assert crashes_in_a_row(FutureJob(recent_errors=[{"at": "2026-01-01T00:00:00+00:00", "error": "old"}])) == 0


def test_a_value_whose_repr_raises__fails_the_run_with_a_type_error(register, make_thing, t0):
    class Garbage:
        def __repr__(self):
            raise SystemExit("repr")

    register("test.garbage", lambda thing, job: Garbage(), max_retries=0)
    prescient.schedule(make_thing(), "test.garbage", now=t0)
    assert prescient.tick(t0).counts["failed"] == 1
    row = JobHistory.objects.get()
    assert row.exception_class_path == "builtins.TypeError"
    assert "Garbage whose repr raised SystemExit" in row.last_error



# --- an operator's Ctrl-C ----------------------------------------------------------------------


def test_ctrl_c_during_a_tick_in_process__hands_the_batch_back_uncharged_then_interrupts_the_caller(
    register, make_thing, t0, batch_mates
):
    import os
    import signal
    import time

    pressed_once: list[int] = []

    def pressed(thing, job):
        if not pressed_once:
            pressed_once.append(job.pk)
            os.kill(os.getpid(), signal.SIGINT)  # the operator's Ctrl-C, while the run waits
            time.sleep(5)

    register("test.ctrl_c", pressed)
    job = prescient.schedule(make_thing(), "test.ctrl_c", now=t0 - SLOT)  # claimed first
    with pytest.raises(KeyboardInterrupt):
        prescient.tick(t0)
    assert batch_mates == []  # claimed in the same batch, after it: handed back, not run
    for pending in FutureJob.objects.all():
        assert (pending.state, pending.reserved_by, pending.run_count, pending.failure_count) == (
            State.SCHEDULED, "", 0, 0
        )
    assert FutureJob.objects.get(pk=job.pk).next_check_at == t0 - SLOT  # due as it was
    # The next tick is not stopped by the last Ctrl-C: it runs all four.
    assert prescient.tick(t0).counts["completed"] == 4


def test_ctrl_c_while_a_batch_loads__hands_it_back_uncharged(register, make_thing, t0, batch_mates, monkeypatch):
    import os
    import signal

    from prescient.kinds import checks as check_kind

    loaded = check_kind.load_entities

    def pressed(jobs):
        os.kill(os.getpid(), signal.SIGINT)  # outside any job's code: stops the tick after this step
        return loaded(jobs)

    monkeypatch.setattr(check_kind, "load_entities", pressed)
    with pytest.raises(KeyboardInterrupt):
        prescient.tick(t0)
    assert batch_mates == []
    pending = [(j.state, j.reserved_by, j.failure_count) for j in FutureJob.objects.all()]
    assert pending == [(State.SCHEDULED, "", 0)] * 3


def test_a_second_ctrl_c__interrupts_at_once_and_leaves_nothing_set_for_the_next_tick(
    register, make_thing, t0, batch_mates, monkeypatch
):
    import os
    import signal

    from prescient import interrupts
    from prescient.kinds import checks as check_kind

    def pressed_twice(jobs):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # Python's own handler again: KeyboardInterrupt here
        raise AssertionError("not reached")

    monkeypatch.setattr(check_kind, "load_entities", pressed_twice)
    with pytest.raises(KeyboardInterrupt):
        prescient.tick(t0)
    assert (interrupts.operator_signal(), interrupts.stopping_all()) == (0, False)
    assert [(j.state, j.failure_count) for j in FutureJob.objects.all()] == [(State.SCHEDULED, 0)] * 3
    monkeypatch.undo()
    assert prescient.tick(t0).counts["completed"] == 3


def test_an_error_handler_returning_a_value_whose_repr_raises__fails_the_job(register, make_thing, t0, batch_mates):
    class Garbage:
        def __repr__(self):
            raise RuntimeError("repr")

    register("test.poison", raiser(ValueError("boom")), error_handler=lambda job, check, now: Garbage())
    prescient.schedule(make_thing(), "test.poison", now=t0)
    assert prescient.tick(t0).counts["failed"] == 1
    reason = JobHistory.objects.get(job_exec="test.poison").reason
    assert "returned Garbage (<Garbage whose repr raised RuntimeError>)" in reason


def test_an_exception_whose_str_raises__is_recorded_with_its_own_class(register, make_thing, t0):
    class Mute(Exception):
        def __str__(self):
            raise RuntimeError("str")

    register("test.poison", raiser(Mute()), max_retries=0)
    prescient.schedule(make_thing(), "test.poison", now=t0)
    assert prescient.tick(t0).counts["failed"] == 1
    row = JobHistory.objects.get()
    assert row.exception_class_path.endswith("Mute") and row.last_error.startswith("Mute: <its str() raised")
