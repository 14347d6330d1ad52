"""Pruning history while a worker sweeps: issue #17's row.

2,000,000 history rows of which 1,000,000 are expired under the default retention (completed
kept 14 days, every other outcome 90): four in five are completed rows that finished 15 to 90
days ago, one in five failed rows 91 to 180 days ago; the kept million finished in the last 13
days. Inserted with one ``generate_series`` statement.

One ``prescient_worker`` (one child) meanwhile sweeps a stream of due checks: a feeder thread
tops the due backlog up whenever it runs low, so the worker is never idle. Measured:

- the worker's throughput (runs that ended per second, counted from their history rows) over a
  window without pruning, then during the prune;
- the prune itself, as ``prescient_prune`` does it (``history_pruner.prune``: batches of 1,000,
  each one statement in autocommit): its total time and its longest single DELETE, timed from
  the client (each DELETE is its own transaction);
- one run of the upkeep duty (bounded to ``BATCHES_PER_RUN`` batches), on fresh expired rows,
  the million kept rows still there: what a worker's pass pays for it;
- a day of ``history_day`` expired rows (issue #36 item 3, by default ten million) removed
  twice in the same run: by the DELETE batches (the day's rows where no partition drops them
  whole), and by dropping the day's partition (``history_pruner.prune`` as the upkeep runs it:
  the partitions listed, their outcomes probed, the day's rows counted, the partition dropped).

PostgreSQL only.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from prescient.clock import db_now
from prescient.engine import bulk, store
from prescient.engine.store import partitions
from prescient.maintenance import history_partitions, history_pruner
from prescient.models import JobHistory, Worker

OLD = "bench.old"  # the entity name of the history rows inserted here (the stream's are bench.item)


def add_history(S: ModuleType, first: int, count: int, expired: int, now: datetime) -> None:
    """History rows ``first``..``first + count - 1``; the first ``expired`` of them past the
    default retention, the rest within it."""
    outcome = "CASE WHEN x % 5 = 0 THEN 'failed' ELSE 'completed' END".replace("%", "%%")
    insert_history(S, first, count, outcome, *finished_times(first, count, expired, now))


def finished_times(first: int, count: int, expired: int, now: datetime) -> tuple[str, list[Any]]:
    """The ``finished_at`` of :func:`add_history`'s rows, as SQL of ``x`` and its parameters."""
    step_old = timedelta(days=75) / max(expired, 1)
    step_recent = timedelta(days=13) / max(count - expired, 1)
    last_expired = first + expired - 1
    finished = (
        "CASE WHEN x > %s THEN %s::timestamptz - ((x - %s) * %s::interval) "
        "WHEN x %% 5 = 0 THEN %s::timestamptz - (x * %s::interval) "
        "ELSE %s::timestamptz - (x * %s::interval) END"
    )
    finished_params = [
        last_expired, now, last_expired, step_recent,
        now - timedelta(days=91), step_old,
        now - timedelta(days=15), step_old,
    ]
    return finished, finished_params


def insert_history(
    S: ModuleType, first: int, count: int, outcome: str, finished: str, finished_params: list[Any]
) -> None:
    """History rows ``first``..``first + count - 1`` of ``outcome`` (SQL of ``x``), finished
    at ``finished`` (SQL of ``x``, with its parameters), in one statement."""
    ours: dict[str, tuple[str, list[Any]]] = {
        "job_id": ("x", []),
        "entity_key": ("CAST(x AS TEXT)", []),
        "outcome": (outcome, []),
        "finished_at": (finished, finished_params),
        "created_at": (finished, finished_params),
        "first_check_at": (finished, finished_params),
    }
    fixed = {"entity_name": OLD, "job_exec": S.NOOP}
    columns, values, params = [], [], []
    for field in bulk.insert_fields(JobHistory):
        columns.append(connection.ops.quote_name(field.column))
        if field.attname in ours:
            sql, sql_params = ours[field.attname]
            values.append(sql)
            params.extend(sql_params)
            continue
        value = fixed[field.attname] if field.attname in fixed else field.get_default()
        values.append("%s")
        params.append(field.get_db_prep_save(value, connection))
    cte, cte_params = S.series(first, first + count - 1)
    S.q(f"{cte}INSERT INTO prescient_jobhistory ({', '.join(columns)}) SELECT {', '.join(values)} FROM g",
        [*cte_params, *params])


class Feeder(threading.Thread):
    """Keeps due checks waiting for the worker (on a connection of its own): whenever fewer
    than ``low`` are due, ``chunk`` more (each on a fresh item), and a wake-up."""

    def __init__(self, S: ModuleType, chunk: int) -> None:
        super().__init__(name="bench-prune-feeder", daemon=True)
        self.S, self.chunk, self.low = S, chunk, chunk // 2
        self.stop = threading.Event()
        self.next_key = 1
        self.error: BaseException | None = None

    def run(self) -> None:
        S = self.S
        try:
            while not self.stop.wait(0.02):
                due = S.q("SELECT count(*) FROM prescient_futurejob WHERE state = 'scheduled' "
                          "AND next_check_at <= now()")[0][0]
                if due >= self.low:
                    continue
                # Items for the chunk (other sections may have made some without ensure_items).
                cte, params = S.series(self.next_key, self.next_key + self.chunk - 1)
                S.q(f"{cte}INSERT INTO bench_item (id, stamp) SELECT x, NULL FROM g ON CONFLICT (id) DO NOTHING",
                    params)
                with transaction.atomic():
                    S.add_jobs(self.next_key, self.chunk, timezone.now() - timedelta(hours=1))
                    store.notify()
                self.next_key += self.chunk
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            connection.close()


class Runs:
    """A worker's runs per second over a stretch of time, from its own count (``jobs_done``,
    written about once a second while it runs jobs)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = time.perf_counter()
        self.first = self.done()

    def done(self) -> int:
        return int(Worker.objects.filter(pid=self.pid, stopped_at=None).values_list("jobs_done", flat=True).get())

    def rate(self) -> float:
        return (self.done() - self.first) / (time.perf_counter() - self.started)


def timed_deletes(slowest: list[tuple[float, str, int, int]]) -> list[float]:
    """Wrap the store's batch DELETE so that each one is timed; returns the list it fills
    (and ``slowest``: seconds, outcome, rows, which DELETE)."""
    seconds: list[float] = []
    original = store.prune_history

    def timed(outcome: str, before: datetime, limit: int, **options: Any) -> tuple[int, datetime | None]:
        started = time.perf_counter()
        deleted = -1
        try:
            deleted, newest = original(outcome, before, limit, **options)
            return deleted, newest
        finally:
            seconds.append(time.perf_counter() - started)
            slowest.append((seconds[-1], outcome, deleted, len(seconds)))
            slowest.sort(reverse=True)
            del slowest[3:]

    store.prune_history = timed  # type: ignore[assignment]
    return seconds


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    total, expired, window = sizes["prune_rows"], sizes["prune_expired"], sizes["prune_window"]
    original = store.prune_history
    S.clear_jobs()
    S.log(f"prune: inserting {total:,} history rows, {expired:,} of them expired")
    now = db_now()
    seconds, _ = S.timed(lambda: add_history(S, 1, total, expired, now))
    S.vacuum("prescient_jobhistory")
    S.log(f"prune: inserted in {seconds:.1f} s")
    feeder = Feeder(S, chunk=sizes["prune_chunk"])
    try:
        with S.workers(1) as (worker,):
            feeder.start()
            time.sleep(1.0)  # the worker under way
            runs = Runs(worker.pid)
            time.sleep(window)
            alone = runs.rate()
            res.add("prune.worker_alone", alone)

            slowest: list[tuple[float, str, int, int]] = []
            deletes = timed_deletes(slowest)
            runs = Runs(worker.pid)
            seconds, done = S.timed(lambda: history_pruner.prune(db_now()))
            during = runs.rate()
            store.prune_history = original
            feeder.stop.set()
            feeder.join(30)
        if feeder.error is not None:
            raise RuntimeError("the feeder failed") from feeder.error
        left = JobHistory.objects.filter(entity_name=OLD).count()
        if done.total != expired or left != total - expired:
            raise RuntimeError(f"pruned {done.total} of {expired} expired rows; {left} of {total - expired} kept left")
        res.add("prune.seconds", seconds)
        res.add("prune.rows_per_second", done.total / seconds)
        longest, median = max(deletes, default=0.0), statistics.median(deletes or [0.0])
        res.add("prune.longest_delete", longest)
        res.add("prune.median_delete", median)
        res.add("prune.worker_during", during)
        S.log(f"prune: {done.total:,} rows in {seconds:.2f} s ({done.total / seconds:,.0f}/s), {len(deletes)} "
              f"DELETEs, the longest {longest * 1e3:.1f} ms (median {median * 1e3:.1f} ms); worker {during:,.0f} "
              f"runs/s during, {alone:,.0f}/s without; slowest DELETEs (s, outcome, rows, nth): {slowest}")

        # One bounded run of the upkeep duty, among the million kept rows.
        fresh = history_pruner.BATCH_SIZE * history_pruner.BATCHES_PER_RUN * 2
        add_history(S, total + 1, fresh, fresh, db_now())
        S.analyze("prescient_jobhistory")
        service = history_pruner.HistoryPruner()
        seconds, removed = S.timed(lambda: service.run_once(db_now()))
        expected = history_pruner.BATCH_SIZE * history_pruner.BATCHES_PER_RUN
        if removed != expected or not service.behind:
            raise RuntimeError(f"one run of the duty removed {removed} rows, expected {expected}")
        res.add("prune.service_run", seconds)
        S.log(f"prune: one run of the upkeep duty removed {removed:,} rows in {seconds * 1e3:.0f} ms")
    finally:
        store.prune_history = original
        feeder.stop.set()
        S.clear_jobs()


def measure_day(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    """A day of ``history_day`` expired rows removed by the DELETE batches, then by dropping its
    partition (issue #36 item 3: "a day of 10 M rows: <= 1 s by partition")."""
    if not S.pg() or not partitions.partitioned():
        return
    rows = sizes["history_day"]
    now = db_now()
    S.clear_jobs()
    day = history_partitions.start_of(now - timedelta(days=400), "day")
    spread = "%s::timestamptz + (x %% 86400000) * interval '1 millisecond'"
    original = history_partitions.drop_expired
    try:
        # The DELETE path: the day's rows where no partition of their own holds them, and the
        # drops left out, so every row goes by the pruner's batches.
        S.log(f"prune: a day of {rows:,} rows, by DELETE")
        insert_history(S, 1, rows, "'completed'", spread, [day])
        S.vacuum("prescient_jobhistory")
        history_partitions.drop_expired = lambda cutoffs, **kw: history_partitions.Dropped()  # type: ignore[assignment]
        seconds, done = S.timed(lambda: history_pruner.prune(now))
        history_partitions.drop_expired = original
        if done.total != rows:
            raise RuntimeError(f"the DELETE path removed {done.total:,} of {rows:,} rows")
        res.add("prune.day_delete", seconds)
        S.log(f"prune: DELETE path {seconds:.2f} s ({rows / seconds:,.0f} rows/s)")

        # The partition path: the same day in a partition of its own, dropped whole (the dead
        # entries the DELETE path left vacuumed first: the pass's batches would step over them).
        S.vacuum("prescient_jobhistory")
        name = history_partitions.name_of(day, day + timedelta(days=1))
        partitions.create(name, day, day + timedelta(days=1))
        insert_history(S, 1, rows, "'completed'", spread, [day])
        S.vacuum(name)
        # An expired day was written weeks ago: its pages went to disk at the checkpoints since,
        # and so do these before the pass. (It changed the drop less than thought: 1.08 s without,
        # 1.04 s with, for 3.7 GB whose unlink as one flushed file took 0.64 s; performance.md.)
        try:
            S.q("CHECKPOINT")
        except DatabaseError:  # neither a superuser nor pg_checkpoint
            S.log("prune: CHECKPOINT not allowed; the partition's pages may still be dirty")
        size = S.q("SELECT pg_total_relation_size(%s::regclass)", [name])[0][0]
        steps: dict[str, list[float]] = {"detach": [], "discard": []}
        originals = {step: getattr(partitions, step) for step in steps}

        def timed(step: str) -> Any:
            def call(partition: str) -> Any:
                started = time.perf_counter()
                try:
                    return originals[step](partition)
                finally:
                    steps[step].append(time.perf_counter() - started)
            return call

        for step in steps:
            setattr(partitions, step, timed(step))
        try:
            seconds, done = S.timed(lambda: history_pruner.prune(now))
        finally:
            for step, function in originals.items():
                setattr(partitions, step, function)
        left = JobHistory.objects.filter(finished_at__lt=now - timedelta(days=100)).count()
        if name not in done.dropped or left:
            raise RuntimeError(f"the partition path dropped {done.dropped}, {left:,} of the day's rows left")
        detach, discard = sum(steps["detach"]), sum(steps["discard"])
        res.add("prune.day_partition", seconds)
        res.add("prune.day_detach", detach)
        res.add("prune.day_drop", discard)
        S.log(f"prune: partition path {seconds:.3f} s: the rows out of the history (DETACH, the history "
              f"locked) in {detach * 1e3:.1f} ms, the detached table's DROP TABLE of {size / 2**30:.2f} GB "
              f"{discard * 1e3:.1f} ms ({len(done.dropped)} partition(s))")
        floor = unlink_seconds(S, size)
        if floor is not None:
            res.add("prune.day_unlink", floor)
            S.log(f"prune: the filesystem's unlink of a {size / 2**30:.2f} GB file just written: {floor * 1e3:.1f} ms")
    finally:
        history_partitions.drop_expired = original
        S.clear_jobs()


def unlink_seconds(S: ModuleType, size: int) -> float | None:
    """Seconds the filesystem of PostgreSQL's data directory takes to unlink a file of ``size``
    bytes just written and flushed: the floor under any ``DROP TABLE`` of as many bytes (which
    unlinks its files at commit). ``None`` where that filesystem is not this host's temporary
    one (a database elsewhere, or the directory not readable): nothing is written next to
    PostgreSQL's own files."""
    try:
        data = S.q("SHOW data_directory")[0][0]
        here = tempfile.gettempdir()
        if not os.path.isdir(data) or os.stat(data).st_dev != os.stat(here).st_dev:
            return None
    except (DatabaseError, OSError):  # not allowed to read the setting, or not this host's path
        return None
    chunk = b"\0" * 2**23
    handle, path = tempfile.mkstemp(prefix="prescient-bench-unlink-", dir=here)
    try:
        try:
            written = 0
            while written < size:
                written += os.write(handle, chunk[: min(len(chunk), size - written)])
            os.fsync(handle)
        finally:
            os.close(handle)
    except OSError:  # the disk filled, or the like: no figure, and no file of gigabytes left behind
        os.unlink(path)
        return None
    started = time.perf_counter()
    os.unlink(path)
    return time.perf_counter() - started
