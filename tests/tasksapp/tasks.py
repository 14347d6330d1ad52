"""django.tasks tasks for tests (imported by the worker through autodiscovery, like any app's)."""

import asyncio
import os
import time

from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_finished, task_started

from tests.testapp.models import RunLog


@task
def add(a, b):
    return a + b


@task
def echo(*args, **kwargs):
    return {"args": args, "kwargs": kwargs}


@task
def boom(message):
    raise ValueError(message)


@task(max_retries=1)
def fails_then_succeeds(key, failures):
    """Raises for its first ``failures`` runs (counted in RunLog under ``key``), then returns the run number."""
    RunLog.objects.create(check_name="fails_then_succeeds", entity_key=key, pid=os.getpid(), started=time.time())
    runs = RunLog.objects.filter(check_name="fails_then_succeeds", entity_key=key).count()
    if runs <= failures:
        raise RuntimeError(f"run {runs} fails")
    return runs


@task(timeout_seconds=1, max_retries=0)
def sleeps(seconds):
    time.sleep(seconds)
    return "woke"


@task
def not_json():
    return object()


@task(takes_context=True)
def attempt(context):
    return context.attempt


@task
async def async_add(a, b):
    await asyncio.sleep(0.01)
    return a + b


@task
def record(key, seconds=0.0):
    """Logs its start and end (RunLog, check_name ``task.record``) around a sleep."""
    log = RunLog.objects.create(check_name="task.record", entity_key=key, pid=os.getpid(), started=time.time())
    time.sleep(seconds)
    RunLog.objects.filter(pk=log.pk).update(ended=time.time())
    return key


@task(max_retries=0)
def returns_unstorable(which):
    """Returns a string PostgreSQL cannot store (tests/engine/test_bad_results.py)."""
    return {"body": {"nul": "a\x00b", "surrogate": "a\ud800b"}[which]}


@task(max_retries=0)
def raises_unstorable(which):
    raise ValueError({"nul": "bad\x00text", "surrogate": "bad\udc80text", "huge": "x" * 5_000_000}[which])


# --- the django.tasks contract (tests/test_tasks_contract.py) ------------------------------------


@task(max_retries=0)
def exits(message):
    raise SystemExit(message)


@task(max_retries=1)
def interrupts_itself(message):
    raise KeyboardInterrupt(message)


@task(takes_context=True)
def sees_itself(context):
    """What the task sees of itself while it runs."""
    result = context.task_result
    return {
        "queue": result.task.queue_name, "priority": result.task.priority, "status": result.status,
        "started_at": result.started_at.isoformat(), "last_attempted_at": result.last_attempted_at.isoformat(),
        "worker_ids": result.worker_ids, "attempt": context.attempt,
    }


@task(timeout_seconds=60, max_retries=0)
def waits_for(path):
    """Runs until the file ``path`` exists (a test lets it finish when it has looked at it)."""
    while not os.path.exists(path):
        time.sleep(0.02)
    return path


@task(max_retries=0)
def trapped_at_start():
    return "never called: a task_started receiver exits"


@task(max_retries=0)
def trapped_at_finish():
    return "done"


@receiver(task_started)
def _exit_at_start(sender, task_result, **kwargs):
    """Host code that misbehaves: a task_started receiver that raises SystemExit for one task."""
    if task_result.task.name == "trapped_at_start":
        raise SystemExit("a task_started receiver exits")


@receiver(task_finished)
def _interrupt_at_finish(sender, task_result, **kwargs):
    """Likewise, a task_finished receiver that raises KeyboardInterrupt."""
    if task_result.task.name == "trapped_at_finish":
        raise KeyboardInterrupt("a task_finished receiver interrupts")
