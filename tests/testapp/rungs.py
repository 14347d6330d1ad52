"""An expectation for tests that run in other processes: each rung logged as a RunLog row."""

import os
import time
from datetime import timedelta

from django.db.models import Q

import prescient

from .models import RunLog, Thing

NAME = "test.shipped"
LADDER = [timedelta(hours=1), timedelta(hours=2), timedelta(hours=3)]


def log_rung(thing: Thing, job: object, step: int) -> None:
    """One row per call: ``entity_key`` is ``<pk>:<step>``."""
    RunLog.objects.create(check_name=NAME, entity_key=f"{thing.pk}:{step}", pid=os.getpid(), started=time.time())


def declare() -> None:
    prescient.expectation(NAME, model="testapp.Thing", met=Q(status="shipped"), ladder=LADDER)(log_rung)


ASYNC_NAME = "test.shipped_async"


async def log_rung_async(thing: Thing, job: object, step: int) -> None:
    """An ``async def`` handler: awaits 0.3 s, then one row per call (started and ended, by the
    host's monotonic clock, one for every process)."""
    import asyncio

    started = time.monotonic()
    await asyncio.sleep(0.3)
    await RunLog.objects.acreate(
        check_name=ASYNC_NAME, entity_key=f"{thing.pk}:{step}", pid=os.getpid(), started=started,
        ended=time.monotonic(),
    )


def declare_async() -> None:
    prescient.expectation(ASYNC_NAME, model="testapp.Thing", met=Q(status="shipped"), ladder=LADDER)(log_rung_async)
