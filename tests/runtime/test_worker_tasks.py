"""django.tasks tasks run by real prescient_worker processes: queues, priority, crashes."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")

from django.db.models import Count
from django.tasks import TaskResultStatus
from django.utils import timezone

from prescient.models import FutureJob, JobHistory, Worker
from tests.runtime.test_worker import Workers, wait_until
from tests.tasksapp import tasks
from tests.testapp.models import RunLog, Thing

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def workers(tmp_path):
    pool = Workers(tmp_path)
    yield pool
    pool.cleanup()


def order_run() -> list[str]:
    rows = RunLog.objects.filter(check_name="task.record").order_by("started")
    return list(rows.values_list("entity_key", flat=True))


def test_worker__runs_tasks_in_child_processes(workers):
    ok = tasks.add.enqueue(2, 3)
    coro = tasks.async_add.enqueue(40, 2)
    failing = tasks.boom.enqueue("no")
    slow = tasks.sleeps.enqueue(30)  # timeout 1 s, no retries
    proc = workers.start("--concurrency", "2")
    # Retries are due at once: a running worker takes them at its next look (heartbeat pace).
    wait_until(lambda: JobHistory.objects.count() == 4, 60, what="all tasks finished")
    proc.send_signal(signal.SIGTERM)
    assert workers.finish(proc, 30) == 0, workers.output(proc)
    for result in (ok, coro, failing, slow):
        result.refresh()
    assert (ok.status, ok.return_value, ok.attempts) == (TaskResultStatus.SUCCESSFUL, 5, 1)
    assert (coro.status, coro.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert failing.status == TaskResultStatus.FAILED and failing.attempts == 3  # MAX_RETRIES 2
    assert len(set(failing.worker_ids)) == 3, "one worker id per attempt"
    assert failing.errors[-1].exception_class_path == "builtins.ValueError"
    assert slow.status == TaskResultStatus.FAILED
    assert slow.errors[-1].exception_class_path == "prescient.exceptions.CheckTimeout"
    assert not FutureJob.objects.exists()


def test_worker__queue_option_serves_only_its_queues_by_priority(workers):
    thing = Thing.objects.create()
    now = timezone.now() - timedelta(minutes=1)
    FutureJob.objects.create(
        entity_name="testapp.thing", entity_key=str(thing.pk), job_exec="test.record",
        first_check_at=now, next_check_at=now, created_at=now,
    )
    low = tasks.record.using(queue_name="a", priority=-5).enqueue("low")
    mid = tasks.record.using(queue_name="a").enqueue("mid")
    high = tasks.record.using(queue_name="a", priority=10).enqueue("high")
    other = tasks.record.using(queue_name="b", priority=100).enqueue("other")
    proc = workers.start("--once", "--concurrency", "1", "--queue", "a")
    assert workers.finish(proc, 60) == 0, workers.output(proc)
    assert order_run() == ["high", "mid", "low"]
    for result in (low, mid, high):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
    other.refresh()
    assert other.status == TaskResultStatus.READY
    assert FutureJob.objects.filter(job_exec="test.record").exists(), "checks are not of queue 'a'"
    assert not RunLog.objects.filter(check_name="test.record").exists()


def test_worker__without_queue_runs_due_tasks_by_priority_then_age(workers):
    """Every claim orders by priority: an older priority-0 task waits behind a newer priority-10 one."""
    low = tasks.record.using(priority=-5).enqueue("low")
    mid = tasks.record.enqueue("mid")
    high = tasks.record.using(priority=10).enqueue("high")
    other = tasks.record.using(queue_name="b", priority=100).enqueue("other")
    proc = workers.start("--once", "--concurrency", "1")
    assert workers.finish(proc, 60) == 0, workers.output(proc)
    assert order_run() == ["other", "high", "mid", "low"]
    for result in (low, mid, high, other):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL


@pytest.mark.postgres
def test_worker__sigkill_mid_run_loses_no_task_and_runs_none_twice_at_once(workers):
    results = [tasks.record.enqueue(f"k{i}", 0.3) for i in range(40)]
    victim = workers.start("--concurrency", "2")
    wait_until(lambda: RunLog.objects.filter(check_name="task.record").count() >= 6, 30, what="victim running")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    killed_at = time.time()
    survivor = workers.start("--concurrency", "2")
    wait_until(lambda: JobHistory.objects.count() == 40, 90, what="all tasks finished")
    survivor.send_signal(signal.SIGTERM)
    assert workers.finish(survivor, 30) == 0
    assert not FutureJob.objects.exists()
    runs: dict[str, list[RunLog]] = {}
    for log in RunLog.objects.filter(check_name="task.record").order_by("started"):
        runs.setdefault(log.entity_key, []).append(log)
    assert len(runs) == 40, "no task lost"
    for logs in runs.values():
        assert len(logs) <= 2
        if len(logs) == 2:
            first, second = logs
            assert first.started < killed_at <= second.started
            assert first.ended is None or first.ended <= second.started, "never two runs at once"
    for result in results:
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.attempts >= len(runs[result.return_value])
    assert not RunLog.objects.values("entity_key").annotate(n=Count("id")).filter(n__gt=2).exists()


def test_worker__wakes_for_a_deferred_task_at_its_time_not_at_the_slot(workers):
    """An idle worker sleeps until the earliest due job, so run_after is kept to the second."""
    proc = workers.start("--concurrency", "1", settings={"WORKER_HEARTBEAT_SECONDS": 30})
    wait_until(lambda: Worker.objects.exists(), 30, what="worker registered")
    time.sleep(1.0)  # idle: on PostgreSQL its next look would be the heartbeat, 30 s away
    result = tasks.add.using(run_after=timedelta(seconds=2)).enqueue(2, 3)
    wait_until(lambda: _status(result) == TaskResultStatus.SUCCESSFUL, 12, interval=0.1, what="deferred task ran")
    result.refresh()
    assert result.started_at >= result.enqueued_at + timedelta(seconds=2)
    proc.send_signal(signal.SIGTERM)
    assert workers.finish(proc, 30) == 0


def _status(result):
    result.refresh()
    return result.status
