"""An expectation for tests that run in other processes: each rung logged as a RunLog row."""

import os
import time
from datetime import timedelta
from typing import Any

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


RACE_NAME = "test.shipped_race"


def log_rung_read(thing: Thing, job: Any, step: int) -> None:
    """One row per call, 20 ms in: started when called (``started``) and when the rung read the instance
    (``ended``: the rung's time in the job's payload, None where none is kept), both by the
    host's wall clock, which the saving process reads too."""
    from datetime import datetime

    started = time.time()
    time.sleep(0.02)  # a call to a mail server
    reached = (job.payload or {}).get("reached") or []
    read_at = datetime.fromisoformat(reached[step - 1]).timestamp() if len(reached) >= step else None
    RunLog.objects.create(check_name=RACE_NAME, entity_key=f"{thing.pk}:{step}", pid=os.getpid(), started=started,
                          ended=read_at)


def declare_race() -> None:
    prescient.expectation(RACE_NAME, model="testapp.Thing", met=Q(status="shipped"), ladder=LADDER)(log_rung_read)
