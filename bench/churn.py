"""Churn: a million jobs through the live table, slot after slot, and what the table looks like after.

A queue's table is written and emptied all day: every job is one INSERT, one UPDATE (claimed)
and one DELETE (ended). PostgreSQL leaves a dead row version behind each, in the table and in
every index, until (auto)vacuum clears them; a due query that walks dead index entries slows
down as they pile up, and so does the sweep. Migration 0010 fits autovacuum to a queue.

Measured here: the idle tick's one query and the sweep rate of one tick on a fresh, vacuumed
table; then ``churn`` jobs pass through it in rounds (each round a slot's worth of due jobs,
swept by two ticks at once) with no manual VACUUM, as in production; then the same two figures
again, after one upkeep pass (what a worker does at its next heartbeat, at most
``WORKER_HEARTBEAT_SECONDS`` after the drain; a tick from cron does it at its start): its
``live_vacuum`` duty clears a large drain's dead rows (prescient/maintenance/live_vacuum.py).
Target: the idle query within 1.5x of the start, the sweep at least 0.67x. Also printed: the
idle query right after the drain, before that pass (what autovacuum alone leaves), the dead rows
left in the live table then, and how often autovacuum ran meanwhile. PostgreSQL only.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from types import ModuleType
from typing import Any

from django.utils import timezone

from prescient.maintenance import run_due

TABLE = "prescient_futurejob"
DONE = "bench.done"
#: Ticks timed for each sweep figure (their median).
SWEEPS = 3


def idle_query(S: ModuleType, reps: int) -> float:
    """Median time of the idle tick's one query (the survey), nothing due."""
    now = timezone.now()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        S.engine_sweep.survey(now)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def sweep_rate(S: ModuleType, count: int, first_key: int, *, fresh: bool = False) -> float:
    """Jobs per second of one in-process tick over ``count`` due jobs: the median of
    :data:`SWEEPS` ticks (one tick is a few seconds, and one sample on a busy machine is noise).
    ``fresh``: the table is vacuumed before each (else only upkeep cleans up, as in production)."""
    rates = []
    for _ in range(SWEEPS):
        if fresh:
            S.vacuum(TABLE, "prescient_jobhistory")
        now = timezone.now()
        S.add_jobs(first_key, count, now - timedelta(minutes=15), DONE)
        seconds, summary = S.timed(lambda: S.tick(now))  # noqa: B023 (called at once)
        assert summary.processed == count, summary.line()
        rates.append(count / seconds)
    return float(statistics.median(rates))


def table_stats(S: ModuleType) -> tuple[int, int]:
    """``(dead rows, autovacuum runs)`` of the live table, from the statistics collector."""
    S.q("SELECT pg_stat_clear_snapshot()")
    rows = S.q("SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE relname = %s", [TABLE])
    return int(rows[0][0]), int(rows[0][1])


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    total, count, reps = sizes["churn"], sizes["sweep"], sizes["idle_reps"]
    if S.q("SHOW autovacuum")[0][0] != "on":
        S.log("churn: this server runs with autovacuum = off, so migration 0010's settings cannot act: "
              "only the live_vacuum duty clears the live table (at the agents' ticks and the upkeep pass)")
    rounds = max(1, min(20, total // count))
    per_round = total // rounds
    S.ensure_items(max(per_round, count))
    S.analyze("bench_item")
    S.clear_jobs()
    S.vacuum(TABLE, "prescient_jobhistory")
    idle_start, sweep_start = idle_query(S, reps), sweep_rate(S, count, 1, fresh=True)
    S.vacuum(TABLE)
    _, autovacuums_before = table_stats(S)
    S.log(f"churn: start: idle query {idle_start * 1e6:.0f} us, sweep {sweep_start:,.0f}/s; "
          f"{total:,} jobs to pass in {rounds} rounds")
    agents = [agent.wait_ready() for agent in [S.Agent(), S.Agent()]]
    passed = 0
    started = time.perf_counter()
    try:
        for number in range(rounds):
            now = timezone.now()
            S.add_jobs(1, per_round, now - timedelta(minutes=15), DONE)
            S.together(agents, cmd="tick", now=now.isoformat())
            left = S.q(f"SELECT count(*) FROM {TABLE}")[0][0]
            if left:
                raise RuntimeError(f"churn round {number + 1}: {left} jobs left unswept")
            passed += per_round
            if number % 5 == 4:
                S.q("TRUNCATE prescient_jobhistory")  # the history is not what is measured here
    finally:
        for agent in agents:
            agent.close()
    churn_seconds = time.perf_counter() - started
    dead, autovacuums_after = table_stats(S)
    idle_drained = idle_query(S, reps)
    upkeep = run_due(timezone.now())  # a worker's next heartbeat pass
    dead_after, _ = table_stats(S)
    idle_end, sweep_end = idle_query(S, reps), sweep_rate(S, count, 1)
    res.add("churn.idle_drained", idle_drained)
    res.add("churn.idle_start", idle_start)
    res.add("churn.idle_end", idle_end)
    res.add("churn.sweep_start", sweep_start)
    res.add("churn.sweep_end", sweep_end)
    res.add("churn.rate", passed / churn_seconds)
    res.add("churn.dead_rows", dead)
    res.add("churn.dead_rows_upkept", dead_after)
    res.add("churn.autovacuums", autovacuums_after - autovacuums_before)
    S.log(f"churn: {passed:,} jobs passed at {passed / churn_seconds:,.0f}/s; {dead:,} dead rows left, "
          f"{autovacuums_after - autovacuums_before} autovacuum runs meanwhile; "
          f"idle query {idle_drained * 1e6:.0f} us; "
          f"upkeep pass {upkeep}, {dead_after:,} dead rows left; end: idle query {idle_end * 1e6:.0f} us, "
          f"sweep {sweep_end:,.0f}/s")
    S.clear_jobs()
