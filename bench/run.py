"""prescient's benchmarks, against the database's own limit: ``python -m bench [--quick]``.

Creates a scratch PostgreSQL database (``prescient_bench`` next to ``--database-url``, dropped
at the end unless ``--keep``) and a scratch SQLite file, runs :mod:`bench.suite` on each, prints
one table and writes ``bench/results.json``. Each figure is the median of several runs (with
min and max); each is also given as a ratio to its raw-SQL baseline, measured in the same run
on the same database: plain psycopg (or sqlite3) doing the least a queue can do.

    python -m bench             # full sizes (make bench): about 7 minutes
    python -m bench --quick     # small sizes (make bench-quick): under a minute
    python -m bench --tiny      # a smoke run of every figure (tests/test_bench_smoke.py)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/prescient_bench"

SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "runs": 5, "sweep": 20_000, "pending": 1_000_000, "due": [1_000, 10_000, 100_000], "idle_reps": 200,
        "one": 2_000, "many": 50_000, "latency": 100, "memory": 100_000, "memory_rounds": 2,
        "sqlite_pending": 1_000_000, "peer_drain": 10_000, "peer_future": 1_000_000,
        "herd_due": 100_000, "herd_pending": 1_000_000, "fanout": 10_000,
        "recurring_schedules": 100_000, "recurring_due": 10_000, "churn": 1_000_000,
        "metrics_pending": 1_000_000, "metrics_history": 1_000_000, "metrics_scrapes": 15,
        "prune_rows": 2_000_000, "prune_expired": 1_000_000, "prune_window": 10.0, "prune_chunk": 2_000,
        "history_day": 10_000_000,
        "io_lanes": [1, 8, 32, 64, 256], "io_async_lanes": [64, 256], "io_per_lane": 60, "io_min": 400,
        "limit_jobs": 2_000, "rate_jobs": 1_500, "spread_jobs": 20_000,
        "scale_pending": [100_000, 1_000_000], "scale_tick_due": 10_000, "scale_due": [10_000, 100_000],
        "scale_workers": [1, 4], "scale_history": 1_000_000,
        "load_jobs": 20_000, "load_concurrency": [1, 2], "load_idle_seconds": 30,
    },
    "quick": {
        "runs": 2, "sweep": 2_000, "pending": 100_000, "due": [300, 3_000], "idle_reps": 60,
        "one": 300, "many": 5_000, "latency": 20, "memory": 2_000, "memory_rounds": 1,
        "sqlite_pending": 100_000, "peer_drain": 1_000, "peer_future": 100_000,
        "herd_due": 10_000, "herd_pending": 100_000, "fanout": 2_000,
        "recurring_schedules": 10_000, "recurring_due": 1_000, "churn": 40_000,
        "metrics_pending": 50_000, "metrics_history": 50_000, "metrics_scrapes": 9, "sqlite_sweep": 1_000,
        "prune_rows": 200_000, "prune_expired": 100_000, "prune_window": 3.0, "prune_chunk": 1_000,
        "history_day": 200_000,
        "io_lanes": [1, 8, 64], "io_async_lanes": [64], "io_per_lane": 20, "io_min": 100,
        "limit_jobs": 400, "rate_jobs": 400, "spread_jobs": 3_000,
        "scale_pending": [20_000, 100_000], "scale_tick_due": 2_000, "scale_due": [2_000, 10_000],
        "scale_workers": [1, 4], "scale_history": 100_000,
        "load_jobs": 2_000, "load_concurrency": [1, 2], "load_idle_seconds": 5,
    },
    "tiny": {
        "runs": 1, "sweep": 200, "pending": 2_000, "due": [50, 200], "idle_reps": 5,
        "one": 50, "many": 200, "latency": 3, "memory": 200, "memory_rounds": 1, "sqlite_pending": 2_000,
        "peer_drain": 50, "peer_future": 2_000, "herd_due": 200, "herd_pending": 2_000, "fanout": 200,
        "recurring_schedules": 200, "recurring_due": 20, "churn": 400,
        "metrics_pending": 2_000, "metrics_history": 2_000, "metrics_scrapes": 3,
        "prune_rows": 2_000, "prune_expired": 1_000, "prune_window": 2.0, "prune_chunk": 100,
        "history_day": 2_000,
        "io_lanes": [1, 8], "io_async_lanes": [8], "io_per_lane": 5, "io_min": 20,
        "limit_jobs": 40, "rate_jobs": 150, "spread_jobs": 300,
        "scale_pending": [1_000, 2_000], "scale_tick_due": 100, "scale_due": [100, 300],
        "scale_workers": [1, 4], "scale_history": 2_000,
        "load_jobs": 200, "load_concurrency": [1], "load_idle_seconds": 1,
    },
}


#: The sections of bench/suite.py, in the order they run.
ALL_SECTIONS = (
    "sweep", "idle", "scheduling", "herd", "churn", "workflows", "recurring", "prune", "metrics", "peers", "io",
    "limits", "scale", "load",
)
#: What ``--quick`` runs unless told otherwise (``--only herd,peers`` runs the rest).
QUICK_SECTIONS = ("sweep", "idle", "scheduling", "metrics")
#: And of those, what it runs on SQLite too (the rest is on PostgreSQL only, to stay under a minute).
QUICK_SQLITE_SECTIONS = ("sweep", "idle")


def section(key: str) -> str:
    """The section of bench/suite.py that measures the figure ``key`` (or what it derives from)."""
    head = key.split(".")[0]
    if key in ("raw.sweep", "raw.sweep2", "raw.per_job") or key.startswith(("raw.time.", "raw.notify.")) \
            or head in ("sweep", "replay", "latency", "memory"):
        return "sweep"
    if key == "raw.claim_idle" or head in ("idle", "scaling"):
        return "idle"
    if key.startswith("raw.insert") or key == "raw.executemany" or head in ("schedule", "save"):
        return "scheduling"
    if head == "workflow":
        return "workflows"
    if head in ("rates", "spread"):
        return "limits"
    return head  # herd, churn, recurring, prune, metrics, peers: their keys start with their name


@dataclass(frozen=True)
class Spec:
    """One printed figure: what it is, its baseline and its target."""

    key: str
    label: str
    unit: str  # "/s" (higher is better), "s", "us", "MB", "x" (lower is better) or "n" (a count)
    baseline: str | None = None
    target: tuple[str, float, str] | None = None  # (">=" | "<=", threshold, "ratio" | "value")
    postgres_only: bool = False
    #: The target on SQLite, the embedded default (none unless given: PostgreSQL's is not SQLite's).
    sqlite_target: tuple[str, float, str] | None = None


def specs(sizes: dict[str, Any]) -> list[Spec]:
    n, p = f"{sizes['sweep']:,}", f"{sizes['pending']:,}"
    out = [
        Spec("raw.sweep", f"raw: claim 100 + delete, {n} due, 1 process", "/s"),
        Spec("sweep.tick", f"sweep: {n} due, one tick (in-process)", "/s", "raw.sweep", (">=", 0.035, "ratio"),
             sqlite_target=(">=", 0.03, "ratio")),
        Spec("sweep.worker", "sweep: one prescient_worker (1 child)", "/s", "sweep.tick", (">=", 0.9, "ratio"),
             postgres_only=True),
        Spec("sweep.worker_default", f"sweep: one prescient_worker, default concurrency ({os.cpu_count()} children)",
             "/s", "sweep.tick", (">=", 1.6, "ratio"), postgres_only=True),
        Spec("replay.floor", "floor: the tick's own statements, replayed from plain psycopg", "/s",
             postgres_only=True),
        Spec("replay.tick", "sweep: the same tick, in-process", "/s", "replay.floor", (">=", 0.75, "ratio"),
             postgres_only=True),
        Spec("raw.sweep2", "raw: claim 100 + delete, 2 processes", "/s", postgres_only=True),
        Spec("sweep.ticks2", "sweep: two ticks at once", "/s", "raw.sweep2", postgres_only=True),
        Spec("sweep.workers2", "sweep: two workers at once (1 child each), against one tick", "/s", "sweep.tick",
             (">=", 1.8, "ratio"), postgres_only=True),
        Spec("raw.claim_idle", f"raw: claim query, {p} pending, none due", "s"),
        Spec("idle.due_query", "idle: due query (the idle tick's one query)", "s", "raw.claim_idle",
             ("<=", 2.0, "ratio"), sqlite_target=("<=", 5.0, "ratio")),
        Spec("idle.due_query_prepared", "idle: the same due query, prepared (plain psycopg)", "s", "raw.claim_idle",
             postgres_only=True),
        Spec("idle.claim", "idle: claim statement, nothing due", "s", "raw.claim_idle"),
        Spec("idle.tick", "idle: whole tick, in-process", "s", "raw.claim_idle", ("<=", 20.0, "ratio")),
        Spec("raw.per_job", "raw: time per job (1 / raw sweep)", "us", postgres_only=True),
        Spec("idle.live_table_mb", "live table on disk, per million pending jobs", "MB", postgres_only=True),
        Spec("idle.live_indexes_mb", "its indexes, per million pending jobs", "MB", postgres_only=True),
        Spec("sweep.statements", "statements per 1,000 jobs swept (one tick, due no-op checks)", "n"),
    ]
    for due in sizes["due"]:
        out.append(Spec(f"scaling.tick.{due}", f"scaling: tick, {due:,} due of {p} + {due:,}", "s",
                        f"raw.time.{due}", postgres_only=True))
        out.append(Spec(f"scaling.per_job.{due}", f"scaling: per due job, {due:,} due", "us", "raw.per_job",
                        postgres_only=True))
    out += [
        Spec("scaling.spread", "scaling: per-job cost, largest / smallest", "x", None, ("<=", 2.0, "value"),
             postgres_only=True),
        Spec("raw.insert_one_tx", f"raw: {sizes['one']:,} single INSERTs, one transaction", "/s"),
        Spec("schedule.one_tx", "schedule() one by one, one transaction", "/s", "raw.insert_one_tx",
             (">=", 0.8, "ratio")),
        Spec("raw.insert_one_autocommit", "raw: single INSERTs, autocommit", "/s"),
        Spec("schedule.one_autocommit", "schedule() one by one, autocommit", "/s", "raw.insert_one_autocommit",
             (">=", 0.8, "ratio")),
        Spec("raw.executemany", f"raw: executemany of {sizes['many']:,} rows", "/s"),
        Spec("schedule.many", "schedule_many(queryset)", "/s", "raw.executemany", (">=", 0.6, "ratio")),
        Spec("schedule.statements", "statements per 1,000 schedule() one by one, autocommit", "n"),
        Spec("schedule.enqueue_statements", "statements per 1,000 django.tasks enqueue() one by one, autocommit",
             "n"),
        Spec("save.without", f"save() of a model without an expectation, {sizes['one']:,} rows one by one", "/s"),
        Spec("save.with_none_pending", "save() of a model with an expectation, none pending", "/s", "save.without",
             (">=", 0.8, "ratio"), sqlite_target=(">=", 0.8, "ratio")),
        Spec("save.with_pending", "save() of a model with an expectation, one pending, not met", "/s",
             "save.without", (">=", 0.667, "ratio"), sqlite_target=(">=", 0.667, "ratio")),
        Spec("save.with_round_trip", "floor: save() of a model without one, then one SELECT 1", "/s", "save.without"),
        Spec("raw.notify.p50", "raw: NOTIFY -> LISTEN, p50", "s", postgres_only=True),
        Spec("raw.notify.p99", "raw: NOTIFY -> LISTEN, p99", "s", postgres_only=True),
        Spec("latency.p50", "run_now -> run starts, idle worker, p50", "s", "raw.notify.p50", ("<=", 0.100, "value"),
             postgres_only=True),
        Spec("latency.p99", "run_now -> run starts, idle worker, p99", "s", "raw.notify.p99", ("<=", 0.500, "value"),
             postgres_only=True),
        Spec("memory.before", "worker RSS before (after a warm-up)", "MB", postgres_only=True),
        Spec("memory.after", f"worker RSS after {sizes['memory']:,} jobs", "MB", "memory.before", postgres_only=True),
        Spec("memory.growth", "worker RSS growth", "MB", "memory.before", ("<=", 10.0, "value"), postgres_only=True),
        Spec("memory.children_growth", "its child process's RSS growth", "MB", "memory.before", postgres_only=True),
        Spec("workflow.flat", f"{sizes.get('fanout', 0):,} jobs without a parent: one tick sweeps them", "s"),
        Spec("workflow.fanout", "the same jobs after one parent: its end to the last child's end", "s",
             "workflow.flat"),
    ]
    hd, hp = f"{sizes['herd_due']:,}", f"{sizes['herd_pending']:,}"
    out += [
        Spec("herd.alone", f"herd: {hd} due at once, nothing else pending, 2 workers", "/s", postgres_only=True),
        Spec("herd.among", f"herd: {hd} due at once among {hp} pending, 2 workers", "/s", "herd.alone",
             (">=", 0.8, "ratio"), postgres_only=True),
        Spec("herd.drain_seconds", "herd: time to drain it", "s", postgres_only=True),
        Spec("herd.longest_transaction", "herd: longest transaction held meanwhile", "s", postgres_only=True),
        Spec("herd.survey", "herd: the idle tick's query meanwhile", "s", "idle.due_query", postgres_only=True),
    ]
    churn = f"{sizes['churn']:,}"
    out += [
        Spec("churn.idle_start", "churn: idle tick's query, fresh table", "s", postgres_only=True),
        Spec("churn.idle_drained", f"churn: the same right after {churn} jobs passed (autovacuum alone)", "s",
             "churn.idle_start", postgres_only=True),
        Spec("churn.idle_end", "churn: the same after the next upkeep pass (live_vacuum), no manual VACUUM", "s",
             "churn.idle_start", ("<=", 2.0, "ratio"), postgres_only=True),
        Spec("churn.sweep_start", "churn: one tick's sweep rate, fresh table", "/s", postgres_only=True),
        Spec("churn.sweep_end", f"churn: the same after {churn} jobs passed", "/s", "churn.sweep_start",
             (">=", 0.67, "ratio"), postgres_only=True),
        Spec("churn.rate", "churn: jobs passed per second (two ticks at once)", "/s", postgres_only=True),
        Spec("churn.dead_rows", "churn: dead rows left in the live table by the drain", "n", postgres_only=True),
        Spec("churn.dead_rows_upkept", "churn: dead rows left after the upkeep pass", "n", postgres_only=True),
        Spec("churn.autovacuums", "churn: autovacuum runs on the live table meanwhile", "n", postgres_only=True),
    ]
    rs, rd = f"{sizes['recurring_schedules']:,}", f"{sizes['recurring_due']:,}"
    out += [
        Spec("recurring.idle_without", "recurring: idle tick, no schedules", "s"),
        Spec("recurring.idle_with", f"recurring: idle tick, {rs} schedules, none due", "s",
             "recurring.idle_without", ("<=", 2.0, "ratio")),
        Spec("recurring.jobs_alone", f"recurring: {rd} due jobs inserted directly, one tick runs them", "s"),
        Spec("recurring.produce_and_run", f"recurring: {rd} due of {rs} schedules in one slot, one tick produces "
             "and runs them", "s", "recurring.jobs_alone", ("<=", 1.5, "ratio")),
        Spec("recurring.produce", "recurring: of which producing them (occurrences to jobs)", "s",
             "recurring.jobs_alone"),
        Spec("recurring.per_occurrence", "recurring: per occurrence, produced and run", "us"),
    ]
    pr, pe = f"{sizes['prune_rows']:,}", f"{sizes['prune_expired']:,}"
    out += [
        Spec("prune.seconds", f"prune: {pe} expired of {pr} history rows, prescient_prune", "s",
             postgres_only=True),
        Spec("prune.rows_per_second", "prune: rows removed per second", "/s", postgres_only=True),
        Spec("prune.longest_delete", "prune: longest single DELETE (its whole transaction)", "s",
             postgres_only=True),
        Spec("prune.median_delete", "prune: median DELETE of 1,000 rows", "s", postgres_only=True),
        Spec("prune.worker_alone", "prune: a worker's runs/s (1 child), not pruning", "/s", postgres_only=True),
        Spec("prune.worker_during", "prune: the same worker's runs/s during the prune", "/s", "prune.worker_alone",
             postgres_only=True),
        Spec("prune.service_run", "prune: one pass of the upkeep duty (10 batches of 1,000)", "s",
             postgres_only=True),
        Spec("prune.day_delete", f"prune: a day of {sizes['history_day']:,} history rows, by DELETE batches", "s",
             postgres_only=True),
        Spec("prune.day_partition", "prune: the same day by its partition (a pruner pass: listed, probed, dropped)",
             "s",
             "prune.day_delete", ("<=", 1.0, "value"), postgres_only=True),
        Spec("prune.day_detach", "prune: of which the rows out of the history (DETACH: the history locked)", "s",
             None, ("<=", 1.0, "value"), postgres_only=True),
        Spec("prune.day_drop", "prune: of which the detached table's DROP TABLE (no lock of the history)", "s",
             postgres_only=True),
        Spec("prune.day_unlink", "prune: the filesystem's unlink of a file of the partition's size, just written",
             "s", postgres_only=True),
    ]
    mp, mh = f"{sizes['metrics_pending']:,}", f"{sizes['metrics_history']:,}"
    out += [
        Spec("metrics.scrape", f"metrics: one scrape of /prescient/metrics, {mp} pending, {mh} history", "s",
             None, ("<=", 0.050, "value"), postgres_only=True),
    ]
    d, f = f"{sizes['peer_drain']:,}", f"{sizes['peer_future']:,}"
    behind = min(300, sizes["peer_drain"])
    out += [
        Spec("peers.enqueue.dtdb", "django-tasks-db: enqueue() one by one", "/s", postgres_only=True),
        Spec("peers.enqueue.prescient", "prescient: enqueue() one by one", "/s", "peers.enqueue.dtdb",
             (">=", 2.0, "ratio"), postgres_only=True),
        Spec("peers.startup.dtdb", "django-tasks-db: db_worker launched, one task due, to that task done", "s",
             postgres_only=True),
        Spec("peers.startup.prescient", "prescient: prescient_worker launched (default concurrency), one task due, "
             "to that task done", "s", "peers.startup.dtdb", ("<=", 0.5, "value"), postgres_only=True),
    ]
    for p in (1, 2):
        out += [
            Spec(f"peers.drain{p}.dtdb", f"django-tasks-db: drain {d} tasks, {p} process(es), CONN_MAX_AGE 0", "/s",
                 postgres_only=True),
            Spec(f"peers.drain{p}.dtdb_kept", "django-tasks-db: the same, CONN_MAX_AGE None", "/s",
                 postgres_only=True),
            Spec(f"peers.drain{p}.prescient", f"prescient: drain {d} tasks, {p} worker(s) of 1 child", "/s",
                 f"peers.drain{p}.dtdb_best", (">=", 10.0, "ratio"), postgres_only=True),
        ]
    out += [
        Spec("peers.poll.dtdb", f"django-tasks-db: idle poll, {f} future tasks", "s", postgres_only=True),
        Spec("peers.poll.prescient", f"prescient: idle poll, {f} future tasks", "s", "peers.poll.dtdb",
             ("<=", 0.01, "ratio"), postgres_only=True),
        Spec("peers.behind.dtdb_kept", f"django-tasks-db: {behind} due behind {f} future", "/s", postgres_only=True),
        Spec("peers.behind.prescient", f"prescient: {behind} due behind {f} future", "/s", "peers.behind.dtdb_kept",
             (">=", 10.0, "ratio"), postgres_only=True),
    ]
    wait = os.environ.get("BENCH_WAIT_MS", "50")
    targets = {1: 0.85, 64: 0.8, 256: 0.5}
    for lanes in sizes.get("io_lanes", []):
        out += [
            Spec(f"io.floor.{lanes}", f"io: floor, {lanes} lanes / {wait} ms", "/s", postgres_only=True),
            Spec(f"io.lanes.{lanes}", f"io: {wait} ms waits, one worker, {lanes} lanes in all", "/s",
                 f"io.floor.{lanes}", (">=", targets[lanes], "ratio") if lanes in targets else None,
                 postgres_only=True),
        ]
        if lanes in sizes.get("io_async_lanes", []):
            out.append(Spec(f"io.async.{lanes}", f"io: the same awaited (async def), {lanes} lanes", "/s",
                            f"io.floor.{lanes}", postgres_only=True))
    if 64 in sizes.get("io_lanes", []) and 1 in sizes.get("io_lanes", []):
        out.append(Spec("io.lanes.rss.64", "io: the worker's memory (all processes), 64 lanes", "MB", "io.lanes.rss.1",
                        ("<=", 1.5, "ratio"), postgres_only=True))
        out.append(Spec("io.lanes.rss.1", "io: the same, 1 lane", "MB", postgres_only=True))
    out += [
        Spec("limits.most_at_once", "limits: most runs at once, a limit of 8, 2 workers x 32 lanes", "n", None,
             ("<=", 8.0, "value"), postgres_only=True),
        Spec("limits.floor", f"limits: floor, 8 at once / {wait} ms", "/s", postgres_only=True),
        Spec("limits.rate", "limits: the drain's rate under the limit", "/s", "limits.floor", postgres_only=True),
        Spec("rates.busiest_second", "rates: most starts in one second, 100/s (a burst of 100), 2 workers x 32 lanes",
             "n", None, ("<=", 200.0, "value"), postgres_only=True),
        Spec("rates.target", "rates: the rate asked", "/s", postgres_only=True),
        Spec("rates.rate", "rates: starts per second after the burst", "/s", "rates.target", (">=", 0.9, "ratio"),
             postgres_only=True),
        Spec("spread.busiest_minute", f"spread: {sizes.get('spread_jobs', 0):,} due in one 15-minute slot, spread: "
             "the busiest minute / the mean", "x", None, ("<=", 1.25, "value"), postgres_only=True),
        Spec("spread.unspread_first_minute", "spread: the same unspread, share started in the slot's first minute",
             "x", postgres_only=True),
    ]
    out += scale_specs(sizes)
    out += load_specs(sizes)
    out.append(Spec("io.peer.dtdb", f"io: django-tasks-db db_worker, one process, {wait} ms waits", "/s",
                    "io.floor.1", postgres_only=True))
    return out


def scale_specs(sizes: dict[str, Any]) -> list[Spec]:
    """bench/scale.py's rows (#36): the targets at the largest size, against the smallest."""
    pendings, dues = sorted(sizes.get("scale_pending", [])), sorted(sizes.get("scale_due", []))
    if not pendings or not dues:
        return []
    small, large = pendings[0], pendings[-1]
    out = []
    for p in pendings:
        at = f"{p:,} pending"
        out += [
            Spec(f"scale.idle_look.{p}", f"scale: idle look (the idle tick's due query), {at}", "s", None,
                 ("<=", 0.001, "value") if p == large else None, postgres_only=True),
            Spec(f"scale.claim_idle.{p}", f"scale: claim, nothing due, {at}", "s", None,
                 ("<=", 0.002, "value") if p == large else None, postgres_only=True),
            Spec(f"scale.tick_per_job.{p}", f"scale: a tick over {sizes['scale_tick_due']:,} due, per job, {at}", "us",
                 f"scale.tick_per_job.{small}" if p != small else None,
                 ("<=", 1.25, "ratio") if p != small else None, postgres_only=True),
            Spec(f"scale.table_mb.{p}", f"scale: live table on disk per million jobs, {at}", "MB", postgres_only=True),
            Spec(f"scale.indexes_mb.{p}", f"scale: its indexes per million jobs, {at}", "MB", postgres_only=True),
        ]
    workers = sorted(sizes["scale_workers"])
    one, most = workers[0], workers[-1]
    for d in dues:
        for w in workers:
            baseline, target = None, None
            if w == one and d != dues[0]:  # the cost per job flat from the smallest herd (1.25x: 0.8 of its rate)
                baseline, target = f"scale.drain.{one}.{dues[0]}", (">=", 0.8, "ratio")
            elif w != one:  # four workers share the slot: judged on the largest herd
                baseline = f"scale.drain.{one}.{d}"
                target = (">=", 1.8, "ratio") if w == most and d == dues[-1] else None
            out.append(Spec(f"scale.drain.{w}.{d}", f"scale: {d:,} due at once among {large:,} pending, {w} worker(s) "
                            "of 1 child", "/s", baseline, target, postgres_only=True))
    rows = f"{sizes['scale_history']:,}"
    for key, label in (("jobs", "admin job list"), ("jobs_overdue", "admin job list, overdue"),
                       ("dashboard", "admin dashboard"), ("history", "admin history list"),
                       ("jobs_search", "admin job list, searched for a key"),
                       ("history_search", "admin history list, searched for a key"),
                       ("api_jobs", "API GET jobs"), ("api_history", "API GET history")):
        out.append(Spec(f"scale.page.{key}", f"scale: {label}, {large:,} pending, {rows} history rows", "s", None,
                        ("<=", 1.0, "value"), postgres_only=True))
    return out


def load_specs(sizes: dict[str, Any]) -> list[Spec]:
    """bench/load.py's rows (#36 item 5): the primary's load per job. A figure per 1,000 jobs is
    also the primary's load per second at 1,000 jobs a second."""
    if not sizes.get("load_concurrency"):
        return []
    n = f"{sizes['load_jobs']:,}"
    out = [Spec("load.noise", "load: the cluster's WAL per second with nothing of the bench running (other clients)",
                "MB", postgres_only=True)]
    for c in sizes["load_concurrency"]:
        who = f"one worker of {c} child{'ren' if c > 1 else ''}"
        out += [
            Spec(f"load.rate.{c}", f"load: {n} due no-op checks drained by {who}", "/s", postgres_only=True),
            Spec(f"load.statements.{c}", f"load: {who}, statements per 1,000 jobs (counted in its processes)", "n",
                 postgres_only=True),
            Spec(f"load.transactions.{c}", f"load: {who}, transactions per 1,000 jobs (pg_stat_database)", "n",
                 postgres_only=True),
            Spec(f"load.wal.{c}", f"load: {who}, WAL per 1,000 jobs (this database's records)", "MB",
                 postgres_only=True),
            Spec(f"load.wal_cluster.{c}", f"load: {who}, the whole cluster's WAL meanwhile, per 1,000 jobs", "MB",
                 postgres_only=True),
            Spec(f"load.connections.{c}", f"load: {who}, most connections to the database at once", "n",
                 postgres_only=True),
        ]
    most = max(sizes["load_concurrency"])
    out += [
        Spec("load.idle.statements", f"load: the same worker of {most} child{'ren' if most > 1 else ''} idle, "
             "statements per minute", "n", postgres_only=True),
        Spec("load.idle.transactions", "load: the same, transactions per minute", "n", postgres_only=True),
        Spec("load.statements.tick", f"load: one tick over {n} due, statements per 1,000 jobs (every thread)", "n",
             postgres_only=True),
        Spec("load.transactions.tick", "load: the same tick, transactions per 1,000 jobs", "n", postgres_only=True),
        Spec("load.wal.tick", "load: the same tick, WAL per 1,000 jobs (this database's records)", "MB",
             postgres_only=True),
        Spec("load.wal.bulk", f"load: {n} jobs inserted in one statement, WAL per 1,000", "MB", postgres_only=True),
        Spec("load.wal.schedule", "load: schedule() one by one, autocommit, WAL per 1,000", "MB", postgres_only=True),
        Spec("load.transactions.schedule", "load: the same, transactions per 1,000", "n", postgres_only=True),
    ]
    return out


def derive(values: dict[str, list[float]], sizes: dict[str, Any]) -> None:
    """Figures computed from others: raw per-job time, raw time for N jobs, the scaling spread."""
    for p in (1, 2):  # django-tasks-db at its better CONN_MAX_AGE, run by run
        both = values.get(f"peers.drain{p}.dtdb"), values.get(f"peers.drain{p}.dtdb_kept")
        if both[0] and both[1]:
            values[f"peers.drain{p}.dtdb_best"] = [max(a, b) for a, b in zip(*both, strict=False)]
    per_job = [statistics.median(values[f"scaling.per_job.{d}"])
               for d in sizes["due"] if f"scaling.per_job.{d}" in values]
    if per_job:  # the idle section's own figures: with or without the sweep's
        values["scaling.spread"] = [max(per_job) / min(per_job)]
    if "raw.sweep" not in values:
        return
    values["raw.per_job"] = [1e6 / v for v in values["raw.sweep"]]
    for due in sizes["due"]:
        values[f"raw.time.{due}"] = [due / v for v in values["raw.sweep"]]


# --- scratch databases -----------------------------------------------------------------------


def scratch(url: str) -> tuple[str, str, str]:
    """``(scratch database URL, its name, the server's maintenance database URL)``."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit(f"--database-url must be a PostgreSQL URL, got {url!r}")
    name = parts.path.lstrip("/") or "prescient_bench"
    return url, name, urlunsplit(parts._replace(path="/postgres"))


def recreate(maintenance_url: str, name: str, *, drop_only: bool = False) -> None:
    import psycopg

    with psycopg.connect(maintenance_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{name}"')


def run_suite(env_db: dict[str, str], sizes: dict[str, Any], only: str, profile: str | None) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "values.json"
        env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATABASE_URL", "BENCH_SQLITE", "DATABASE_URL")}
        env.update(env_db, DJANGO_SETTINGS_MODULE="bench.settings")
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        command = [sys.executable, "-m", "bench.suite", "--out", str(out), "--sizes", json.dumps(sizes), "--only", only]
        if profile:
            command += ["--profile", profile]
        subprocess.run(command, cwd=ROOT, env=env, check=True)
        return dict(json.loads(out.read_text()))


# --- the machine -------------------------------------------------------------------------------


def machine(pg_url: str | None) -> dict[str, Any]:
    import sqlite3

    import django

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "django": django.get_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    if pg_url:
        try:
            import psycopg

            with psycopg.connect(pg_url.replace("postgres://", "postgresql://", 1)) as conn:
                info["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
                info["synchronous_commit"] = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
                info["autovacuum"] = conn.execute("SHOW autovacuum").fetchone()[0]  # type: ignore[index]
                info["psycopg"] = psycopg.__version__
        except Exception as exc:  # the table says so; the figures need no more
            info["postgresql"] = f"unknown ({exc})"
    return info


# --- the table ---------------------------------------------------------------------------------


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "s":
        if value < 1e-3:
            return f"{value * 1e6:.0f} us"
        if value < 1:
            return f"{value * 1e3:.1f} ms"
        return f"{value:.2f} s"
    if unit == "us":
        return f"{value:.1f} us"
    if unit == "MB":
        return f"{value:.1f} MB"
    if unit == "n":
        return f"{value:,.0f}"
    return f"{value:.2f}x"


def summarise(db: str, values: dict[str, list[float]], sizes: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for spec in specs(sizes):
        if spec.postgres_only and db != "postgresql":
            continue
        runs = values.get(spec.key)
        if not runs:
            continue
        median = statistics.median(runs)
        base = values.get(spec.baseline or "")
        ratio = median / statistics.median(base) if base and statistics.median(base) else None
        met = None
        target = spec.target if db == "postgresql" else spec.sqlite_target
        if target:
            op, limit, on = target
            measured = ratio if on == "ratio" else median
            if measured is not None:
                met = measured >= limit if op == ">=" else measured <= limit
        rows.append({
            "db": db, "key": spec.key, "label": spec.label, "unit": spec.unit, "runs": runs,
            "median": median, "min": min(runs), "max": max(runs), "baseline": spec.baseline,
            "ratio": ratio, "target": list(target) if target else None, "met": met,
            **({"own_target": True} if db != "postgresql" and target else {}),
        })
    return rows


def base_name(key: str | None) -> str:
    """What a ratio is taken against, in a word: raw SQL, the floor, the tick, a peer."""
    if not key:
        return ""
    if key.startswith("raw."):
        return "raw"
    if key.startswith("peers."):
        return "dtdb"
    names = {"replay.floor": "floor", "sweep.tick": "tick", "memory.before": "before", "herd.alone": "alone",
             "idle.due_query": "idle", "recurring.idle_without": "none", "recurring.jobs_alone": "jobs",
             "churn.idle_start": "start", "churn.sweep_start": "start",
             "prune.worker_alone": "alone"}
    return names.get(key, key.split(".")[0])


def target_text(row: dict[str, Any]) -> str:
    # A SQLite row shows only a target of its own (results of older runs kept PostgreSQL's there).
    if not row["target"] or (row["db"] != "postgresql" and not row.get("own_target")):
        return ""
    op, limit, on = row["target"]
    shown = f"{limit:g}x" if on == "ratio" else fmt(limit, row["unit"])
    return f"{op} {shown}" + (f" {base_name(row['baseline'])}" if on == "ratio" else "")


def table(rows: list[dict[str, Any]], *, markdown: bool = False) -> str:
    head = ["figure", "median", "min", "max", "ratio", "of", "target", ""]
    body = []
    for row in rows:
        unit = row["unit"]
        verdict = "" if row["met"] is None else ("met" if row["met"] else "MISSED")
        body.append([
            row["label"], fmt(row["median"], unit), fmt(row["min"], unit), fmt(row["max"], unit),
            "" if row["ratio"] is None else f"{row['ratio']:.2f}x",
            "" if row["ratio"] is None else base_name(row["baseline"]), target_text(row), verdict,
        ])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
             for cells in [head, *body]]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick", help="small sizes, under a minute")
    mode.add_argument("--tiny", action="store_const", dest="mode", const="tiny", help="a smoke run of every figure")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (default: 5 full, 2 quick)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL),
                        help="the scratch PostgreSQL database to create and drop (default: %(default)s)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--only", default=None,
                        help=f"sections, comma-separated: {', '.join(ALL_SECTIONS)} (default: all; --quick "
                        f"leaves out {', '.join(s for s in ALL_SECTIONS if s not in QUICK_SECTIONS)})")
    parser.add_argument("--set", action="append", default=[], metavar="SIZE=N",
                        help="override one size of the mode, e.g. --set churn=200000 (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results.json"), help="where to write the results")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown too")
    parser.add_argument("--profile", default=None, metavar="PATH",
                        help="also profile one PostgreSQL tick sweep with pyinstrument into PATH")
    args = parser.parse_args(argv)
    mode_name = args.mode or "full"
    sqlite_only = args.only
    if args.only is None:  # bench-quick stays under a minute: the herd, churn and peers take minutes
        args.only = ",".join(QUICK_SECTIONS if mode_name == "quick" else ALL_SECTIONS)
        sqlite_only = ",".join(QUICK_SQLITE_SECTIONS) if mode_name == "quick" else args.only
    sizes = dict(SIZES[mode_name])
    if args.runs:
        sizes["runs"] = args.runs
    for override in args.set:
        name, _, value = override.partition("=")
        listed = isinstance(sizes.get(name), list)  # e.g. --set io_lanes=1,64
        numbers = value.split(",") if listed else [value]
        if name not in sizes or not all(number.isdigit() for number in numbers):
            parser.error(f"--set {override!r}: expected SIZE=N (N,M,… for a list) with SIZE one of "
                         f"{', '.join(sorted(sizes))}")
        sizes[name] = [int(number) for number in numbers] if listed else int(value)
    started = time.monotonic()
    results: dict[str, dict[str, list[float]]] = {}
    pg_url = None if args.no_postgres else args.database_url
    if pg_url:
        url, name, maintenance = scratch(pg_url)
        print(f"== PostgreSQL: scratch database {name!r}, {mode_name} sizes", file=sys.stderr, flush=True)
        recreate(maintenance, name)
        try:
            results["postgresql"] = run_suite({"BENCH_DATABASE_URL": url}, sizes, args.only, args.profile)
        finally:
            if not args.keep:
                recreate(maintenance, name, drop_only=True)
    if not args.no_sqlite:
        print(f"== SQLite: scratch file, {mode_name} sizes", file=sys.stderr, flush=True)
        tmp = tempfile.mkdtemp(prefix="prescient-bench-")
        try:
            sqlite_sizes = dict(sizes, pending=sizes["sqlite_pending"], sweep=sizes.get("sqlite_sweep", sizes["sweep"]))
            results["sqlite"] = run_suite({"BENCH_SQLITE": str(Path(tmp) / "bench.sqlite3")}, sqlite_sizes,
                                          sqlite_only or args.only, None)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for db, values in results.items():
        db_sizes = sizes if db == "postgresql" else dict(
            sizes, pending=sizes["sqlite_pending"], sweep=sizes.get("sqlite_sweep", sizes["sweep"]))
        derive(values, db_sizes)
        rows += summarise(db, values, db_sizes)
    info = machine(scratch(pg_url)[2] if pg_url else None)
    elapsed = time.monotonic() - started
    print()
    print(f"prescient bench, {mode_name} sizes, {sizes['runs']} run(s) per figure (median, min, max), "
          f"{elapsed:.0f} s")
    print(f"machine: {info.get('cpu', '?')}, {info['cpus']} CPUs, {info.get('memory_gb', '?')} GB, {info['os']}; "
          f"Python {info['python']}, Django {info['django']}, PostgreSQL {info.get('postgresql', '-')}, "
          f"SQLite {info['sqlite']}" + (f"; autovacuum {info['autovacuum']}" if "autovacuum" in info else ""))
    for db in results:
        print(f"\n{'PostgreSQL' if db == 'postgresql' else 'SQLite'}")
        print(table([r for r in rows if r["db"] == db]))
        if args.markdown:
            print()
            print(table([r for r in rows if r["db"] == db], markdown=True))
    missed = [r["label"] for r in rows if r["met"] is False]
    print(f"\ntargets: {sum(1 for r in rows if r['met'])} met, {len(missed)} missed"
          + (": " + "; ".join(missed) if missed else ""))
    Path(args.json).write_text(json.dumps(
        {"mode": mode_name, "sizes": sizes, "seconds": round(elapsed, 1), "machine": info, "figures": rows}, indent=2
    ))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
