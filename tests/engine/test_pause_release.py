"""Pause and release (rules 1-5): in-process, with checks that pause or release during their own
run to stand in for a person acting while the run is in flight; then on PostgreSQL with real
tick processes racing a person's release."""

import time
from collections import defaultdict
from datetime import timedelta
from itertools import pairwise

import pytest
from django.db import transaction

import prescient
from prescient.engine import verbs as services
from prescient.exceptions import InvalidTransition
from prescient.models import FutureJob, JobHistory, Workflow
from prescient.states import Outcome, State
from tests.conftest import manage
from tests.testapp.models import RunLog

SLOT = timedelta(minutes=15)
HOUR = timedelta(hours=1)


@pytest.fixture
def calls():
    return []


@pytest.fixture
def during_run(register, calls):
    """Register ``test.during``: records its call, runs ``action(thing, job)``, returns ``result``."""

    def make(action=None, result=None):
        def check(thing, job):
            calls.append(job.pk)
            if action is not None:
                action(thing, job)
            return result

        register("test.during", check)
        return "test.during"

    return make


def live(job):
    return FutureJob.objects.filter(pk=job.pk).first()


# --- rule 1: pausing -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_pause_workflow__pauses_its_scheduled_jobs_and_nothing_of_it_starts(make_thing, t0, calls, during_run):
    check = during_run()
    jobs = [prescient.schedule(make_thing(), check, workflow="w", now=t0) for _ in range(2)]
    other = prescient.schedule(make_thing(), check, workflow="other", now=t0)

    assert prescient.pause(workflow="w", now=t0) == 2

    for job in jobs:
        assert (live(job).state, live(job).last_state) == (State.PAUSED, State.SCHEDULED)
    assert Workflow.objects.get(name="w").paused_at == t0
    summary = prescient.tick(t0 + HOUR)
    assert summary.counts["completed"] == 1
    assert calls == [other.pk]


@pytest.mark.django_db
def test_pause_one_job__leaves_the_rest_of_its_workflow_alone(make_thing, t0, calls, during_run):
    check = during_run()
    paused = prescient.schedule(make_thing(), check, workflow="w", now=t0)
    running = prescient.schedule(make_thing(), check, workflow="w", now=t0)

    assert prescient.pause(job=paused, now=t0) == 1

    prescient.tick(t0)
    assert calls == [running.pk]
    assert (live(paused).state, live(paused).last_state) == (State.PAUSED, State.SCHEDULED)
    assert not Workflow.objects.get(name="w").is_paused


@pytest.mark.django_db
def test_a_running_job__is_marked_paused_and_its_run_goes_on(make_thing, t0, calls, during_run):
    seen = []

    def pause_myself(thing, job):
        assert services.pause(workflow="w", now=t0) == 1
        row = FutureJob.objects.get(pk=job.pk)
        seen.append((row.state, row.last_state, bool(row.reserved_by)))

    check = during_run(pause_myself, result=None)
    job = prescient.schedule(make_thing(), check, workflow="w", now=t0)
    summary = prescient.tick(t0)
    assert seen == [(State.PAUSED, State.RUNNING, True)]
    assert calls == [job.pk]  # not interrupted: the run returned its result
    assert summary.counts["completed"] == 1  # rule 3: an ending outcome ends a paused job as usual
    assert JobHistory.objects.get().outcome == Outcome.COMPLETED


@pytest.mark.django_db
def test_a_pause_during_a_tick__stops_the_claiming_of_the_workflows_other_jobs(make_thing, t0, calls, during_run):
    check = during_run(lambda thing, job: services.pause(workflow="w", now=t0))
    first = prescient.schedule(make_thing(), check, workflow="w", now=t0 - SLOT)
    second = prescient.schedule(make_thing(), check, workflow="w", now=t0)

    prescient.tick(t0, batch_size=1)  # a batch claimed before the pause would still run: see docs

    assert calls == [first.pk]
    assert (live(second).state, live(second).last_state) == (State.PAUSED, State.SCHEDULED)
    assert prescient.release(workflow="w", now=t0) == 1
    prescient.tick(t0, batch_size=1)
    assert calls == [first.pk, second.pk]


# --- rule 2: scheduled into a paused workflow ---------------------------------------------------


@pytest.mark.django_db
def test_a_job_scheduled_into_a_paused_workflow__starts_paused(make_thing, t0, calls, during_run):
    check = during_run()
    assert prescient.pause(workflow="w", create_workflow=True, now=t0) == 0  # no jobs yet: made, paused
    job = prescient.schedule(make_thing(), check, workflow="w", now=t0)
    unrelated = prescient.schedule(make_thing(), check, now=t0)

    assert (job.state, job.last_state) == (State.PAUSED, State.SCHEDULED)
    assert live(unrelated).state == State.SCHEDULED
    prescient.tick(t0)
    assert calls == [unrelated.pk]

    assert prescient.release(workflow="w", now=t0) == 1
    prescient.schedule(make_thing(), check, workflow="w", now=t0)  # released: starts scheduled
    prescient.tick(t0)
    assert len(calls) == 3 and calls[1] == job.pk


# --- rule 3: a paused job whose run finishes -------------------------------------------------------


@pytest.mark.django_db
def test_a_recheck_of_a_paused_job__keeps_it_paused_with_the_new_due_time(make_thing, t0, calls, during_run):
    check = during_run(lambda thing, job: services.pause(job=job.pk, now=t0), result=2 * HOUR)
    job = prescient.schedule(make_thing(), check, workflow="w", now=t0)

    summary = prescient.tick(t0)

    assert summary.counts["rescheduled"] == 1
    row = live(job)
    assert (row.state, row.last_state, row.next_check_at) == (State.PAUSED, State.SCHEDULED, t0 + 2 * HOUR)
    assert (row.reserved_by, row.reserved_at, row.check_count, row.run_count) == ("", None, 1, 1)
    prescient.tick(t0 + 3 * HOUR)
    assert calls == [job.pk]

    assert prescient.release(job=job, now=t0 + 3 * HOUR) == 1
    assert live(job).state == State.SCHEDULED


# --- rule 4: release ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_release__returns_scheduled_jobs_and_overdue_ones_run_at_the_next_tick(make_thing, t0, calls, during_run):
    check = during_run()
    jobs = [prescient.schedule(make_thing(), check, workflow="w", now=t0) for _ in range(3)]
    prescient.pause(workflow="w", now=t0)
    prescient.tick(t0 + 5 * HOUR)
    assert calls == []

    assert prescient.release(workflow="w", now=t0 + 5 * HOUR) == 3

    assert {live(job).state for job in jobs} == {State.SCHEDULED}
    assert {live(job).last_state for job in jobs} == {""}
    assert not Workflow.objects.get(name="w").is_paused
    summary = prescient.tick(t0 + 5 * HOUR)
    assert summary.counts["completed"] == 3
    assert sorted(calls) == sorted(job.pk for job in jobs)  # once each, not once per missed slot


@pytest.mark.django_db
def test_release_while_the_run_is_in_flight__goes_back_to_running_and_never_runs_twice(
    make_thing, t0, calls, during_run
):
    seen = []

    def pause_and_release(thing, job):
        services.pause(workflow="w", now=t0)
        assert services.release(workflow="w", now=t0) == 1
        row = FutureJob.objects.get(pk=job.pk)
        seen.append((row.state, row.last_state, row.reserved_by == job.reserved_by))

    check = during_run(pause_and_release, result=HOUR)
    job = prescient.schedule(make_thing(), check, workflow="w", now=t0)

    summary = prescient.tick(t0)

    assert seen == [(State.RUNNING, "", True)]
    assert calls == [job.pk]
    assert summary.counts["rescheduled"] == 1
    row = live(job)
    assert (row.state, row.next_check_at, row.reserved_by) == (State.SCHEDULED, t0 + HOUR, "")


@pytest.mark.django_db
def test_release_of_one_job_paused_mid_run__puts_it_back_to_running(make_thing, t0, calls, during_run):
    def pause_and_release(thing, job):
        assert services.pause(job=job, now=t0) == 1
        assert services.release(job=job.pk, now=t0) == 1
        assert FutureJob.objects.get(pk=job.pk).state == State.RUNNING

    check = during_run(pause_and_release, result=None)
    prescient.schedule(make_thing(), check, now=t0)
    assert prescient.tick(t0).counts["completed"] == 1
    assert len(calls) == 1


@pytest.mark.django_db
def test_release_after_the_paused_run_returned__schedules_it(make_thing, t0, calls, during_run):
    check = during_run(lambda thing, job: services.pause(workflow="w", now=t0), result=HOUR)
    job = prescient.schedule(make_thing(), check, workflow="w", now=t0)
    prescient.tick(t0)
    assert live(job).state == State.PAUSED

    assert prescient.release(workflow="w", now=t0 + 2 * HOUR) == 1
    assert (live(job).state, live(job).last_state) == (State.SCHEDULED, "")
    prescient.tick(t0 + 2 * HOUR)
    assert calls == [job.pk, job.pk]  # the re-check it asked for, once


# --- rule 5: counts and idempotence -------------------------------------------------------------------


@pytest.mark.django_db
def test_pause_and_release__are_idempotent_and_return_counts(make_job, make_thing, t0):
    scheduled = make_job(workflow="w")
    running = make_job(workflow="w", state=State.RUNNING, reserved_by="tick:0:x", reserved_at=t0)
    buried = make_job(workflow="w", state=State.BURIED)
    make_job(workflow="other")

    assert prescient.pause(workflow="w", now=t0) == 2
    assert prescient.pause(workflow="w", now=t0 + SLOT) == 0
    assert Workflow.objects.get(name="w").paused_at == t0  # the first pause is the one remembered
    assert prescient.pause(job=scheduled, now=t0) == 0
    assert (live(running).state, live(running).last_state) == (State.PAUSED, State.RUNNING)
    assert live(buried).state == State.BURIED  # left for a person

    assert prescient.release(workflow="w", now=t0) == 2
    assert prescient.release(workflow="w", now=t0) == 0
    assert prescient.release(job=scheduled.pk, now=t0) == 0
    with pytest.raises(prescient.UnknownWorkflow, match="Unknown workflow 'never-paused'"):
        prescient.release(workflow="never-paused", now=t0)  # a typo, not a no-op
    assert live(scheduled).state == State.SCHEDULED
    assert (live(running).state, live(running).reserved_by) == (State.RUNNING, "tick:0:x")
    assert FutureJob.objects.filter(workflow="other", state=State.SCHEDULED).count() == 1


@pytest.mark.django_db
def test_pause_of_a_buried_job__is_refused_and_changes_nothing(make_job, t0):
    job = make_job(state=State.BURIED)
    before = FutureJob.objects.filter(pk=job.pk).values().get()
    with pytest.raises(InvalidTransition, match=f"Job {job.pk} is buried: 'pause' is not allowed"):
        prescient.pause(job=job.pk, now=t0)
    assert FutureJob.objects.filter(pk=job.pk).values().get() == before


@pytest.mark.django_db
@pytest.mark.parametrize("verb", ["pause", "release"])
def test_pause_and_release__need_exactly_one_workflow_or_job(make_job, t0, verb):
    job = make_job(workflow="w")
    call = getattr(prescient, verb)
    with pytest.raises(ValueError, match="exactly one of workflow= or job="):
        call(now=t0)
    with pytest.raises(ValueError, match="exactly one of workflow= or job="):
        call(workflow="w", job=job, now=t0)
    with pytest.raises(ValueError, match="must not be empty"):
        call(workflow="", now=t0)
    with pytest.raises(prescient.JobNotFound):
        call(job=job.pk + 1000, now=t0)
    assert live(job).state == State.SCHEDULED


# --- real processes on PostgreSQL ------------------------------------------------------------------
#
# A tick process runs test.slow jobs (each sleeps 1.5 s) while this process pauses and releases
# their workflow. Claims commit before a check starts, so the live table says when a run is in
# flight (RunLog rows are written inside the check's transaction and appear only when it ends).
# What a pause or release did is read in its own transaction, so later settles cannot blur it.
# Correctness (ran once, never overlapping, none lost) never depends on timing; a final in-process
# sweep runs anything the ticks left due, so a job missed by them would show as run != 1.

T0_ISO = "2026-11-22T10:00:00+00:00"
WAIT = 30.0  # upper bound on every wait; the happy path takes a few seconds


def seed(make_thing, t0, count):
    """``count`` test.slow jobs of workflow "w" due at t0; the 1st, 3rd … ask for a re-check."""
    jobs = []
    for i in range(count):
        thing = make_thing(name="1.5", status="open" if i % 2 else "again")
        jobs.append(prescient.schedule(thing, "test.slow", workflow="w", at=t0, now=t0))
    return jobs


def wait_until(condition, what, processes):
    """Poll ``condition`` (bounded); fail at once if a tick process ends first."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return
        for process in processes:
            if process.poll() is not None:
                out, err = process.communicate(timeout=WAIT)
                raise AssertionError(f"the tick ended before {what}:\n{out}\n{err}")
        time.sleep(0.02)
    raise AssertionError(f"timed out after {WAIT:g}s waiting until {what}")


def in_flight_count():
    return FutureJob.objects.of_workflow("w").in_flight().count()


def tick_process():
    return manage("prescient_tick", "--now", T0_ISO, "--batch-size", "1")


def finish(*processes):
    """Wait (bounded) for tick processes to exit; each must succeed. Kills leftovers on failure."""
    try:
        for process in processes:
            out, err = process.communicate(timeout=WAIT)
            assert process.returncode == 0, f"tick failed:\n{out}\n{err}"
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=WAIT)


def pause_and_look():
    """Pause "w"; return (count, ids paused while scheduled, ids paused mid-run)."""
    with transaction.atomic():
        count = prescient.pause(workflow="w")
        paused = FutureJob.objects.of_workflow("w").filter(state=State.PAUSED)
        held = set(paused.filter(last_state=State.SCHEDULED).values_list("pk", flat=True))
        mid_run = set(paused.filter(last_state=State.RUNNING).in_flight().values_list("pk", flat=True))
        assert count == len(held) + len(mid_run) == FutureJob.objects.of_workflow("w").count()
    return count, held, mid_run


def release_and_look():
    """Release "w"; return (count, ids put back to running with their run still in flight)."""
    with transaction.atomic():
        count = prescient.release(workflow="w")
        running = set(
            FutureJob.objects.of_workflow("w").in_flight().filter(state=State.RUNNING).values_list("pk", flat=True)
        )
        assert not FutureJob.objects.of_workflow("w").filter(state=State.PAUSED).exists()
    return count, running


def assert_ran_once_and_none_lost(jobs, t0):
    """Every job ran exactly once, its runs never overlapped, and it is accounted for."""
    runs = defaultdict(list)
    for log in RunLog.objects.filter(check_name="test.slow"):
        runs[log.entity_key].append((log.started, log.ended))
    for job in jobs:
        intervals = sorted(runs[job.entity_key])
        assert len(intervals) == 1, f"job {job.pk} ran {len(intervals)} times"
        assert all(ended is not None for _, ended in intervals)
        assert all(a[1] <= b[0] for a, b in pairwise(intervals)), f"job {job.pk} overlapped itself"

    live_rows = {row.pk: row for row in FutureJob.objects.all()}
    history = {row.job_id: row for row in JobHistory.objects.all()}
    assert len(live_rows) + len(history) == len(jobs)
    for i, job in enumerate(jobs):
        assert (job.pk in live_rows) != (job.pk in history), f"job {job.pk} lost or duplicated"
        if i % 2 == 0:  # asked for a re-check: live, scheduled in an hour, nothing held
            row = live_rows[job.pk]
            assert (row.state, row.last_state, row.reserved_by) == (State.SCHEDULED, "", "")
            assert (row.next_check_at, row.run_count, row.check_count) == (t0 + HOUR, 1, 1)
        else:
            row = history[job.pk]
            assert (row.outcome, row.run_count) == (Outcome.COMPLETED, 1)


@pytest.mark.postgres
@pytest.mark.slow
def test_processes__release_after_the_paused_run_finished(transactional_db, make_thing, t0):
    jobs = seed(make_thing, t0, 2)
    first = tick_process()
    second = None
    try:
        wait_until(lambda: in_flight_count() == 1, "the tick claimed a job", [first])
        _count, held, mid_run = pause_and_look()
        assert held, "a job should have been waiting when the workflow was paused"
        finish(first)  # the paused run returns; nothing else of "w" may be claimed

        assert not RunLog.objects.filter(entity_key__in=[j.entity_key for j in jobs if j.pk in held]).exists(), (
            "a job of a paused workflow started"
        )
        for pk in held | {pk for pk in mid_run if FutureJob.objects.filter(pk=pk).exists()}:
            row = FutureJob.objects.get(pk=pk)
            assert (row.state, row.last_state, row.reserved_by) == (State.PAUSED, State.SCHEDULED, "")

        released, running = release_and_look()
        assert running == set()  # no run was in flight any more
        assert released == FutureJob.objects.filter(state=State.SCHEDULED).count()
        second = tick_process()
        finish(second)
    finally:
        finish_quietly(first, second)
    prescient.tick(t0)  # sweep
    assert_ran_once_and_none_lost(jobs, t0)


@pytest.mark.postgres
@pytest.mark.slow
def test_processes__release_before_the_paused_run_finished(transactional_db, make_thing, t0):
    jobs = seed(make_thing, t0, 2)
    tick = tick_process()
    try:
        wait_until(lambda: in_flight_count() == 1, "the tick claimed a job", [tick])
        _, _, mid_run = pause_and_look()
        released, running = release_and_look()
        assert mid_run and running == mid_run, "the run (1.5 s) should still be in flight"
        assert released == 2
        finish(tick)
    finally:
        finish_quietly(tick)
    prescient.tick(t0)  # sweep
    assert_ran_once_and_none_lost(jobs, t0)


@pytest.mark.postgres
@pytest.mark.slow
def test_processes__two_ticks_racing_a_release(transactional_db, make_thing, t0):
    jobs = seed(make_thing, t0, 4)
    ticks = [tick_process(), tick_process()]
    try:
        wait_until(lambda: in_flight_count() == 2, "both ticks claimed a job", ticks)
        _, _, mid_run = pause_and_look()
        _released, running = release_and_look()
        assert running, "a run (1.5 s) should still be in flight"
        assert running <= mid_run
        finish(*ticks)  # both claim what the release made due, never the same job twice
    finally:
        finish_quietly(*ticks)
    prescient.tick(t0)  # sweep
    assert_ran_once_and_none_lost(jobs, t0)


def finish_quietly(*processes):
    for process in processes:
        if process is not None and process.poll() is None:
            process.kill()
            process.communicate(timeout=WAIT)
