"""Limited checks that record when each run started and ended (monotonic, one clock for every
process of the host) in ``<dir>/<thing.pk>``, where ``thing.name`` is ``<dir>|<seconds>``."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import prescient
from tests.testapp.models import Thing


def _run(thing: Thing) -> None:
    folder, seconds = thing.name.split("|")
    started = time.monotonic()
    time.sleep(float(seconds))
    with (Path(folder) / str(thing.pk)).open("a") as out:
        out.write(f"{started} {time.monotonic()}\n")


@prescient.check("limit.three", model="testapp.Thing", limit=prescient.Limit(running=3))
def three_at_once(thing: Thing, job: object) -> None:
    _run(thing)


@prescient.check("limit.per_status", model="testapp.Thing", limit=prescient.Limit(running=1, key="status"))
def one_per_status(thing: Thing, job: object) -> None:
    _run(thing)


@prescient.check("rate.five", model="testapp.Thing", rate=prescient.Rate(runs=5, per=timedelta(seconds=1)))
def five_a_second(thing: Thing, job: object) -> None:
    _run(thing)
