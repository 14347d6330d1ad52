"""django.tasks tasks for tests (imported by the worker through autodiscovery, like any app's)."""

import asyncio
import os
import time

from django.tasks import task

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
