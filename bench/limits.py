"""Limits, rates and spread (issue #33): what the database holds across workers, measured.

- **limits**: two workers of one child and 32 lanes each drain jobs of a check limited to 8 runs
  at once (50 ms waits): the most runs seen at once (every start and end recorded by the runs
  themselves, on the host's monotonic clock) and the rate, against the limit's floor (8 / wait).
- **rates**: the same workers on a check limited to 100 runs started a second: the most starts
  in any one second, and the rate over the drain against the rate itself.
- **spread**: 20,000 jobs due in one 15-minute slot, spread and not, run by ticks given the time
  minute by minute (``now``): the busiest minute against the mean; unspread, the share of the
  first minute.

The limited checks are declared only in the workers (``BENCH_LIMITS=1``): every other section's
claim stays as it was.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from django.db import transaction
from django.utils import timezone

import prescient

LIMITED, RATED = 8, 100


def _runs(folder: Path) -> list[tuple[float, float]]:
    found = []
    for path in folder.iterdir():
        for line in path.read_text().splitlines():
            start, end = line.split()
            found.append((float(start), float(end)))
    return found


def _most_at_once(runs: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _drain(S: ModuleType, check: str, key: str, count: int) -> list[tuple[float, float]]:
    """Two idle workers (one child, 32 lanes each), then ``count`` jobs of ``check`` made due
    at once; returns every run's (start, end)."""
    S.clear_jobs()
    S.ensure_items(count)
    with tempfile.TemporaryDirectory() as folder:
        extra = {"BENCH_LIMITS": "1", "BENCH_RUNLOG": folder}
        started = [S.WorkerRun(1, extra=["--lanes", "32"], env=extra) for _ in range(2)]
        try:
            for worker in started:
                worker.wait_ready()
            with transaction.atomic():
                S.add_jobs(1, count, timezone.now() - timedelta(minutes=15), check=check)
                column = "limit_key" if check == "bench.limited" else "rate_key"
                S.q(f"UPDATE prescient_futurejob SET {column} = %s", [key])
                S.notify()
            S.wait_swept(timeout=900)
        finally:
            for worker in started:
                worker.stop()
        return _runs(Path(folder))


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    wait = float(os.environ.get("BENCH_WAIT_MS", "50")) / 1000
    runs = _drain(S, "bench.limited", "bench.limited:bench.limited", sizes["limit_jobs"])
    starts = sorted(start for start, _ in runs)
    res.add("limits.most_at_once", float(_most_at_once(runs)))
    res.add("limits.floor", LIMITED / wait)
    res.add("limits.rate", len(runs) / (max(end for _, end in runs) - starts[0]))
    S.log(f"limits: limit {LIMITED}, 2 workers x 32 lanes: at most {_most_at_once(runs)} at once, "
          f"{res.values['limits.rate'][-1]:,.0f}/s")
    runs = _drain(S, "bench.rated", "bench.rated:bench.rated", sizes["rate_jobs"])
    starts = sorted(start for start, _ in runs)
    busiest = max(sum(1 for s in starts[i:] if s - start < 1.0) for i, start in enumerate(starts))
    seconds = starts[-1] - starts[0]
    res.add("rates.busiest_second", float(busiest))
    res.add("rates.rate", (len(starts) - RATED) / seconds if seconds else 0.0)  # after the burst
    res.add("rates.target", float(RATED))
    S.log(f"rates: {RATED}/s, 2 workers x 32 lanes: busiest second {busiest} starts, "
          f"{res.values['rates.rate'][-1]:,.1f}/s after the burst")
    spread(res, sizes, S)
    S.clear_jobs()


def spread(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    """20,000 due in one slot, spread and not: ticks given the time minute by minute."""
    from prescient.checks import unregister

    count = sizes["spread_jobs"]
    S.clear_jobs()
    S.ensure_items(count)
    prescient.check("bench.spread", model="bench.Item", spread=True)(lambda item, job: None)
    try:
        start = timezone.now().replace(microsecond=0) + timedelta(days=1)
        boundary = start - timedelta(minutes=start.minute % 15, seconds=start.second)
        items = S.Item.objects.filter(pk__lte=count)
        prescient.schedule_many(items, "bench.spread", now=boundary - timedelta(minutes=1))
        at_boundary = S.tick(boundary).processed
        per_minute = [
            S.tick(boundary + timedelta(minutes=minute + 1, microseconds=-1)).processed for minute in range(15)
        ]
        per_minute[0] += at_boundary
        mean = sum(per_minute) / 15
        res.add("spread.busiest_minute", max(per_minute) / mean)
        S.clear_jobs()
        S.add_jobs(1, count, boundary, check=S.NOOP)
        first = S.tick(boundary + timedelta(minutes=1, microseconds=-1)).processed
        res.add("spread.unspread_first_minute", first / count)
        S.log(f"spread: {count:,} due in one 15-minute slot: busiest minute {max(per_minute) / mean:.2f}x the mean "
              f"(unspread: {first / count:.0%} in the first minute)")
    finally:
        unregister("bench.spread")
