"""Checks used by tests that run in other processes (which discover them like any host app)."""

import time
from datetime import timedelta

import prescient

from .models import RunLog, Thing


def _log(name: str, thing: Thing) -> RunLog:
    import os

    return RunLog.objects.create(check_name=name, entity_key=str(thing.pk), pid=os.getpid(), started=time.time())


@prescient.check("test.record", model="testapp.Thing")
def record(thing: Thing, job: object) -> timedelta | None:
    """Logs the call; re-checks in an hour when the thing's status is ``again``."""
    _log("test.record", thing)
    return timedelta(hours=1) if thing.status == "again" else None


@prescient.check("test.slow", model="testapp.Thing")
def slow(thing: Thing, job: object) -> timedelta | None:
    """Logs its start and end around a sleep of ``float(thing.name)`` seconds."""
    log = _log("test.slow", thing)
    time.sleep(float(thing.name))
    RunLog.objects.filter(pk=log.pk).update(ended=time.time())
    return timedelta(hours=1) if thing.status == "again" else None


@prescient.check("test.sleep_forever", model="testapp.Thing")
def sleep_forever(thing: Thing, job: object) -> None:
    time.sleep(3600)


@prescient.check("test.spin", model="testapp.Thing")
def spin(thing: Thing, job: object) -> None:
    while True:
        pass


@prescient.check("test.exit", model="testapp.Thing")
def hard_exit(thing: Thing, job: object) -> None:
    """Ends its process at once, as a crashing extension would."""
    import os

    os._exit(1)


@prescient.check("test.unstoppable", model="testapp.Thing")
def unstoppable(thing: Thing, job: object) -> None:
    """Spins with SIGALRM blocked: only killing its process stops it."""
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        pass
