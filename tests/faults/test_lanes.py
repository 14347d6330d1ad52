"""Lanes (issue #33, item 1): one worker child runs many jobs at once, sync on threads and
``async def`` on its event loop; a run past its timeout is stopped in its lane, or costs its
child when it will not stop; whatever a run raises is charged to its job alone."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

from prescient.models import FutureJob, JobHistory, Worker
from prescient.states import Outcome, State
from tests.testapp.models import Thing

from .conftest import children_of, most_at_once, seed, wait_until
from .conftest import run_intervals as runs

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("check", ["fault.quiet", "lane.async_quiet"], ids=["sync", "async"])
def test_one_child_with_8_lanes__runs_8_jobs_at_once_each_once(processes, tmp_path, check):
    seed(48, check, name=f"{tmp_path}|0.3")
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "8")
    wait_until(lambda: JobHistory.objects.count() == 48, 60, what="every job to end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    done = runs(tmp_path)
    assert len(done) == 48, "each job ran once"
    assert most_at_once(done) == 8, most_at_once(done)  # 8 lanes, never more
    assert set(JobHistory.objects.values_list("outcome", flat=True)) == {Outcome.COMPLETED}
    assert "lanes=8" in processes.output(worker)


def test_a_check_with_lanes_1__never_runs_twice_at_once_in_a_child(processes, tmp_path):
    alone = {str(thing.pk) for thing in seed(12, "lane.one_at_a_time", name=f"{tmp_path}|0.1")}
    seed(16, "fault.quiet", name=f"{tmp_path}|0.1")
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "8")
    wait_until(lambda: JobHistory.objects.count() == 28, 60, what="every job to end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    ones = [
        (float(start), float(end))
        for key in alone for start, end in (line.split() for line in (tmp_path / key).read_text().splitlines())
    ]
    assert len(ones) == 12
    assert most_at_once(ones) == 1
    assert most_at_once(runs(tmp_path)) > 1  # the other check did share the lanes


def test_a_run_spinning_past_its_timeout__is_stopped_in_its_lane_and_the_child_lives(processes, tmp_path):
    [spin] = seed(1, "lane.spin")
    seed(20, "fault.quiet", name=f"{tmp_path}|0.2")
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "4")
    wait_until(lambda: JobHistory.objects.count() == 20, 60, what="the others")
    wait_until(lambda: FutureJob.objects.get(entity_key=str(spin.pk)).failure_count == 1, 30, what="the spin charged")
    [child] = children_of(worker.pid)
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    job = FutureJob.objects.get(entity_key=str(spin.pk))
    assert (job.state, job.run_count, job.failure_count) == (State.SCHEDULED, 1, 1)
    assert job.recent_errors[-1]["exception_class_path"] == "prescient.exceptions.CheckTimeout"
    assert "killed" not in job.last_error  # stopped in its lane, not by killing the child
    assert "ChildDied" not in processes.output(worker)
    assert child  # one child all along: not replaced


def test_a_run_blocked_past_its_timeout__costs_its_child_and_the_other_lanes_are_handed_back(processes, tmp_path):
    [stuck] = seed(1, "lane.stuck")
    quiet = seed(3, "fault.quiet", name=f"{tmp_path}|30", due_in=-timedelta(minutes=30))  # claimed with it
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "4")
    first = children_of(worker.pid)
    wait_until(lambda: FutureJob.objects.get(entity_key=str(stuck.pk)).failure_count == 1, 30, what="stuck charged")
    job = FutureJob.objects.get(entity_key=str(stuck.pk))
    assert job.last_error.startswith("CheckTimeout:") and "its process was killed" in job.last_error
    for thing in quiet:  # in flight beside it: handed back, nothing charged
        other = FutureJob.objects.get(entity_key=str(thing.pk))
        assert (other.run_count, other.failure_count) == (0, 0), other
    assert children_of(worker.pid) != first  # replaced
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)


def test_an_async_run_past_its_timeout__is_cancelled_and_charged(processes):
    [stuck] = seed(1, "lane.async_stuck")
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "4")
    wait_until(lambda: FutureJob.objects.get(entity_key=str(stuck.pk)).failure_count == 1, 30, what="charged")
    job = FutureJob.objects.get(entity_key=str(stuck.pk))
    assert job.recent_errors[-1]["exception_class_path"] == "prescient.exceptions.CheckTimeout"
    assert "killed" not in job.last_error
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0


def test_the_lanes_close_their_connections_when_idle_and_when_the_worker_stops(processes):
    from django.db import connection

    def backends() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return int(cursor.fetchone()[0])

    seed(32, "fault.slow", name="0.2")  # writes RunLog rows: each lane opens its connection
    before = backends()
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "8")
    wait_until(lambda: JobHistory.objects.count() == 32, 60, what="every job to end")
    busy = backends()
    wait_until(lambda: backends() <= before + 3, 20, what="the idle lanes to close their connections")
    assert busy >= before + 8  # the lanes had theirs
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    wait_until(lambda: backends() == before, 10, what="every connection closed")
    assert Worker.objects.filter(stopped_at__isnull=False).count() == 1
    assert Thing.objects.count() == 32


def test_async_expectation_handlers__are_awaited_side_by_side_on_the_lanes(processes):
    from datetime import timedelta

    from django.utils import timezone

    import prescient
    from prescient import expectations
    from tests.testapp import rungs
    from tests.testapp.models import RunLog

    expectations.unregister(rungs.ASYNC_NAME)
    rungs.declare_async()
    try:
        now = timezone.now()
        things = [Thing.objects.create() for _ in range(16)]
        for thing in things:  # started two hours ago: the first rung has passed
            prescient.expect(thing, rungs.ASYNC_NAME, start=now - timedelta(hours=2), now=now - timedelta(hours=2))
        FutureJob.objects.update(next_check_at=timezone.now() - timedelta(minutes=1))
        worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "8",
                                 env_extra={"PRESCIENT_TEST_EXPECTATION": "async"})
        wait_until(lambda: RunLog.objects.filter(check_name=rungs.ASYNC_NAME).count() == 16, 60, what="16 rungs")
        worker.send_signal(signal.SIGTERM)
        assert processes.finish(worker, 30) == 0, processes.output(worker)
        logs = list(RunLog.objects.filter(check_name=rungs.ASYNC_NAME))
        assert sorted(log.entity_key for log in logs) == sorted(f"{thing.pk}:1" for thing in things)
        assert most_at_once([(log.started, log.ended) for log in logs]) > 1  # awaited side by side
        assert not FutureJob.objects.filter(failure_count__gt=0).exists()
    finally:
        expectations.unregister(rungs.ASYNC_NAME)


def test_django_tasks__sync_and_async_run_on_the_lanes(processes):
    pytest.importorskip("django.tasks")
    from tests.tasksapp import tasks

    sync = [tasks.add.enqueue(i, 1) for i in range(10)]
    awaited = [tasks.async_add.enqueue(i, 2) for i in range(10)]
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "8")
    wait_until(lambda: JobHistory.objects.count() == 20, 60, what="every task to end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    for i, result in enumerate(sync):
        result.refresh()
        assert (result.status.name, result.return_value) == ("SUCCESSFUL", i + 1)
    for i, result in enumerate(awaited):
        result.refresh()
        assert (result.status.name, result.return_value) == ("SUCCESSFUL", i + 2)


def test_sync_expectation_handlers__run_on_the_lanes(processes):
    from datetime import timedelta

    from django.utils import timezone

    import prescient
    from prescient import expectations
    from tests.testapp import rungs
    from tests.testapp.models import RunLog

    expectations.unregister(rungs.NAME)
    rungs.declare()
    try:
        now = timezone.now()
        things = [Thing.objects.create() for _ in range(12)]
        for thing in things:
            prescient.expect(thing, rungs.NAME, start=now - timedelta(hours=2), now=now - timedelta(hours=2))
        FutureJob.objects.update(next_check_at=timezone.now() - timedelta(minutes=1))
        worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "4",
                                 env_extra={"PRESCIENT_TEST_EXPECTATION": "1"})
        wait_until(lambda: RunLog.objects.filter(check_name=rungs.NAME).count() == 12, 60, what="12 rungs")
        worker.send_signal(signal.SIGTERM)
        assert processes.finish(worker, 30) == 0, processes.output(worker)
        keys = sorted(RunLog.objects.filter(check_name=rungs.NAME).values_list("entity_key", flat=True))
        assert keys == sorted(f"{thing.pk}:1" for thing in things)
    finally:
        expectations.unregister(rungs.NAME)


def test_a_spread_slot__is_started_over_the_slot_by_a_worker(processes, tmp_path):
    """One-minute slots: jobs of a spread check (lane.spread) due in this minute start each at its
    offset into the minute: a worker wakes for each, neither all at the boundary nor early. Only
    the next 20 seconds are watched (bounded: the test never waits for the slot's end)."""
    import time
    from datetime import UTC, datetime, timedelta

    from django.test import override_settings
    from django.utils import timezone

    import prescient

    now = timezone.now()
    boundary = now.replace(second=0, microsecond=0)
    if now - boundary > timedelta(seconds=20):  # too little of this slot left: the next one
        boundary += timedelta(minutes=1)
    things = [Thing.objects.create(name=f"{tmp_path}|0") for _ in range(60)]
    with override_settings(PRESCIENT={"SLOT_MINUTES": 1}):
        for thing in things:  # due in that minute, each at its offset
            prescient.schedule(thing, "lane.spread", now=boundary - timedelta(seconds=1))
    due = {job.entity_key: job.next_check_at for job in FutureJob.objects.all()}
    wall = time.time() - time.monotonic()  # the runs stamp the host's monotonic clock
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "4", settings={"SLOT_MINUTES": 1})
    wait_until(lambda: Worker.objects.exists(), 30, what="the worker to start")
    # The 20 seconds watched start once the worker is up and the slot has begun: a window
    # taken from the worker's start alone fell before the next slot's first job when that slot
    # was chosen (CI: 36 s into the minute, nothing watched).
    ready = max(Worker.objects.get().started_at + timedelta(seconds=1), boundary)
    watched = {key for key, at in due.items() if ready < at <= ready + timedelta(seconds=20)}
    wait_until(lambda: JobHistory.objects.filter(entity_key__in=watched).count() == len(watched), 90,
               what="the jobs due in the 20 seconds watched")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    lateness = []
    for key in watched:
        [line] = (tmp_path / key).read_text().splitlines()
        started = datetime.fromtimestamp(float(line.split()[0]) + wall, tz=UTC)
        lateness.append((started - due[key]).total_seconds())
    assert len(lateness) >= 5, lateness  # about 20 of the 60 fall in those 20 seconds
    assert all(-1.0 < late < 3.0 for late in lateness), lateness  # each at its offset, not before
