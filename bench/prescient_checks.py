"""The benchmark's checks: they do (next to) nothing, so the figures measure prescient itself."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from django.db.models import Q

import prescient

from .models import Item, Parcel

AGAIN = timedelta(hours=1)
#: The wait of bench.wait and bench.await (BENCH_WAIT_MS, default 50 ms).
WAIT_SECONDS = float(os.environ.get("BENCH_WAIT_MS", "50")) / 1000


@prescient.check("bench.noop", model="bench.Item")
def noop(item: Item, job: object) -> timedelta | None:
    """Ends the job of an even item; re-checks an odd one in an hour: half end, half re-schedule."""
    return AGAIN if item.pk % 2 else None


@prescient.check("bench.stamp", model="bench.Item")
def stamp(item: Item, job: object) -> None:
    """Records when its run started (for the wake-up latency), then ends."""
    started = time.time()
    Item.objects.filter(pk=item.pk).update(stamp=started)


@prescient.check("bench.done", model="bench.Item")
def done(item: Item, job: object) -> None:
    """Ends its job: what passes through the live table in the churn section."""


@prescient.expectation("bench.parcel", model="bench.Parcel", met=Q(stamp__lt=0), ladder=[timedelta(hours=1)])
def parcel_late(parcel: Parcel, job: object, step: int) -> None:
    """Never met in the bench (stamps are positive): its saves measure the receivers' cost."""


@prescient.check("bench.wait", model="bench.Item", timeout_seconds=60)
def wait(item: Item, job: object) -> None:
    """A check that waits on the world: a call of ``BENCH_WAIT_MS`` (default 50) milliseconds,
    as a request to a carrier's API would, then ends its job."""
    time.sleep(WAIT_SECONDS)


@prescient.check("bench.await", model="bench.Item", timeout_seconds=60)
async def await_(item: Item, job: object) -> None:
    """The same wait, awaited (an ``async def`` check, as one using httpx.AsyncClient would)."""
    import asyncio

    await asyncio.sleep(WAIT_SECONDS)


# --- limits (bench/limits.py): declared only where BENCH_LIMITS=1, so that every other section's
# claim is the one it always was (a declared limit makes the claim ask the database about keys).

if os.environ.get("BENCH_LIMITS") == "1":
    LIMITED, RATED = 8, 100

    def _record(item: Item) -> None:
        """The wait, with its start and end (monotonic) appended to a file of this process."""
        started = time.monotonic()
        time.sleep(WAIT_SECONDS)
        with open(os.path.join(os.environ["BENCH_RUNLOG"], str(os.getpid())), "a") as out:
            out.write(f"{started} {time.monotonic()}\n")

    @prescient.check("bench.limited", model="bench.Item", limit=prescient.Limit(running=LIMITED))
    def limited(item: Item, job: object) -> None:
        """At most LIMITED at once across every worker."""
        _record(item)

    @prescient.check("bench.rated", model="bench.Item",
                     rate=prescient.Rate(runs=RATED, per=timedelta(seconds=1)))
    def rated(item: Item, job: object) -> None:
        """At most RATED started a second across every worker."""
        _record(item)
