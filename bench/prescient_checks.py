"""The benchmark's checks: they do (next to) nothing, so the figures measure prescient itself."""

from __future__ import annotations

import time
from datetime import timedelta

import prescient

from .models import Item

AGAIN = timedelta(hours=1)


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
