"""Recurring schedules at scale: many schedules, one slot in which a tenth of them are due.

Issue #13's row: 100,000 schedules of which 10,000 have an occurrence in the same slot. Timed:

- one tick that produces those occurrences (each a job of its own) and runs them, against the
  same number of due jobs inserted directly and run by one tick (what producing adds);
- producing them alone (``prescient.engine.recurring.produce``);
- an idle tick with every schedule waiting for a later occurrence, against the idle tick with
  no schedule at all (target: at most twice as long; the survey asks the partial index
  ``prescient_schedule_due`` for one due row).

Every schedule is a valid row the producer handles: a check schedule of ``bench.noop`` on its
own item, ``0 0 * * *`` in Europe/Berlin (a cron in a zone with daylight saving time, the
costlier case), inserted with one statement. The due ones wait for the last Berlin midnight
(as if nothing had run since), the others for the next one. Time is passed in (``now``, a slot
boundary), so no occurrence comes due while measuring.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

from django.db import connection
from django.utils import timezone

from prescient import cron, slots
from prescient.conf import setting
from prescient.engine import bulk
from prescient.engine import recurring as engine
from prescient.models import Occurrence, Schedule
from prescient.runtime.tick import tick

EXPRESSION, ZONE = "0 0 * * *", "Europe/Berlin"


def occurrences(now: datetime) -> tuple[datetime, datetime]:
    """``(last, upcoming)``: the schedule's last occurrence at or before ``now`` and its next."""
    last = cron.next_cron(EXPRESSION, ZONE, now - timedelta(days=2))
    while (upcoming := cron.next_cron(EXPRESSION, ZONE, last)) <= now:
        last = upcoming
    return last, upcoming


def add_schedules(S: ModuleType, count: int, next_at: datetime, slot_minutes: int, now: datetime) -> None:
    """``count`` schedules ``bench-1``.. of ``bench.noop`` on items 1.., waiting for ``next_at``,
    in one statement (every column written: ours, or the field's default)."""
    ours = {
        "kind": "check", "entity_name": "bench.item", "job_exec": S.NOOP, "cron": EXPRESSION, "every_seconds": None,
        "timezone": ZONE, "catch_up": "latest", "next_at": next_at, "due_at": slots.round_up(next_at, slot_minutes),
        "created_at": now - timedelta(days=3), "updated_at": now - timedelta(days=3),
    }
    columns, values, params = [], [], []
    for field in bulk.insert_fields(Schedule):
        columns.append(connection.ops.quote_name(field.column))
        if field.attname in ("name", "entity_key"):
            values.append("'bench-' || CAST(x AS TEXT)" if field.attname == "name" else "CAST(x AS TEXT)")
            continue
        value = ours[field.attname] if field.attname in ours else field.get_default()
        values.append("%s")
        params.append(field.get_db_prep_save(value, connection))
    cte, cte_params = S.series(1, count)
    S.q(f"{cte}INSERT INTO {Schedule._meta.db_table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM g",
        [*cte_params, *params])


def make_due(S: ModuleType, count: int, last: datetime, slot_minutes: int) -> None:
    """The first ``count`` schedules wait for ``last`` again (their counters reset)."""
    S.q(f"DELETE FROM {Occurrence._meta.db_table}")
    when = [db(name, value) for name, value in (("next_at", last), ("due_at", slots.round_up(last, slot_minutes)))]
    S.q(f"UPDATE {Schedule._meta.db_table} SET next_at = %s, due_at = %s, runs = 0, skipped = 0, missed = 0, "
        "last_run_at = NULL WHERE CAST(entity_key AS INTEGER) <= %s", [*when, count])
    S.vacuum(Schedule._meta.db_table)


def db(name: str, value: Any) -> Any:
    return Schedule._meta.get_field(name).get_db_prep_save(value, connection)


def clear(S: ModuleType) -> None:
    S.clear_jobs()
    S.q(f"DELETE FROM {Occurrence._meta.db_table}")
    S.q(f"DELETE FROM {Schedule._meta.db_table}")


def idle(reps: int, now: datetime) -> float:
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        tick(now)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    count, due, reps = sizes["recurring_schedules"], sizes["recurring_due"], sizes["idle_reps"]
    runs = min(sizes["runs"], 3)
    slot_minutes = int(setting("SLOT_MINUTES"))
    S.ensure_items(count)
    S.analyze("bench_item")
    for run in range(runs):
        now = slots.floor(timezone.now(), slot_minutes)
        last, upcoming = occurrences(now)
        clear(S)
        tick(now)  # warm-up: the upkeep duties that run once per process interval run now
        res.add("recurring.idle_without", idle(reps, now))

        add_schedules(S, count, upcoming, slot_minutes, now)
        S.vacuum(Schedule._meta.db_table)
        res.add("recurring.idle_with", idle(reps, now))

        S.add_jobs(1, due, slots.round_up(last, slot_minutes))
        S.analyze("prescient_futurejob")
        seconds, summary = S.timed(lambda: tick(now))  # noqa: B023 (called at once)
        assert summary.processed == due, summary.line()
        res.add("recurring.jobs_alone", seconds)
        S.clear_jobs()

        make_due(S, due, last, slot_minutes)
        seconds, produced = S.timed(lambda: engine.produce(now))  # noqa: B023
        assert (produced.runs, produced.missed, produced.skipped) == (due, 0, 0), produced
        res.add("recurring.produce", seconds)
        S.clear_jobs()

        make_due(S, due, last, slot_minutes)
        seconds, summary = S.timed(lambda: tick(now))  # noqa: B023
        assert summary.processed == due, summary.line()
        ran = S.q(f"SELECT sum(runs), count(*) FROM {Schedule._meta.db_table} WHERE runs > 0")[0]
        if tuple(ran) != (due, due) or Occurrence.objects.count() != due:
            raise RuntimeError(f"{due} occurrences due, but schedules report {ran}")
        res.add("recurring.produce_and_run", seconds)
        res.add("recurring.per_occurrence", seconds / due * 1e6)
        last_of = {key: values[-1] for key, values in res.values.items() if key.startswith("recurring.")}
        S.log(f"recurring run {run + 1}/{runs}: {due:,} due of {count:,} schedules, produced and run in "
              f"{seconds:.2f} s (the jobs alone {last_of['recurring.jobs_alone']:.2f} s, producing "
              f"{last_of['recurring.produce']:.2f} s); idle tick {last_of['recurring.idle_with'] * 1e3:.2f} ms "
              f"(without schedules {last_of['recurring.idle_without'] * 1e3:.2f} ms)")
    clear(S)
