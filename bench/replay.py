"""The sweep's own SQL floor: the statements one tick sends, replayed from plain psycopg.

One tick over ``count`` due jobs is recorded (every statement, its parameters, and where its
transactions begin and commit). The table is then restored to the same rows, ids included, and
in each run the same tick is timed, and so is the replay of its recorded statements through a
plain psycopg connection (client-side binding, as Django uses): the same work on the same data,
without Django or prescient's Python. ``tick / replay`` is how close prescient is to its own
floor (issue #16's target: at least 0.6).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection


@dataclass
class Recording:
    """What one tick sent: ``("sql", sql, params, many)``, ``("begin",)`` and ``("commit",)``."""

    ops: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def statements(self) -> int:
        return sum(1 for op in self.ops if op[0] == "sql")


def record(func: Any) -> tuple[Any, Recording]:
    """Call ``func()`` and record what it sends on the default connection."""
    recording = Recording()
    in_transaction = False
    original_commit, original_rollback = connection.commit, connection.rollback

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal in_transaction
        if connection.in_atomic_block and not in_transaction:
            recording.ops.append(("begin",))
            in_transaction = True
        recording.ops.append(("sql", sql, params, many))
        return execute(sql, params, many, context)

    def commit() -> None:
        nonlocal in_transaction
        if in_transaction:
            recording.ops.append(("commit",))
            in_transaction = False
        original_commit()

    def rollback() -> None:
        nonlocal in_transaction
        if in_transaction:
            recording.ops.append(("rollback",))
            in_transaction = False
        original_rollback()

    connection.commit, connection.rollback = commit, rollback  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(wrapper):
            result = func()
    finally:
        del connection.commit, connection.rollback  # back to the class's methods
    return result, recording


def replay(recording: Recording) -> float:
    """Send the recorded statements through a fresh plain psycopg connection; returns seconds."""
    import psycopg

    settings = connection.settings_dict
    conn = psycopg.connect(
        dbname=settings["NAME"], user=settings.get("USER") or None, password=settings.get("PASSWORD") or None,
        host=settings.get("HOST") or None, port=settings.get("PORT") or None, autocommit=True,
        cursor_factory=psycopg.ClientCursor,
    )
    try:
        cursor = conn.cursor()
        started = time.perf_counter()
        for op in recording.ops:
            if op[0] == "sql":
                _, sql, params, many = op
                if many:
                    cursor.executemany(sql, params)
                else:
                    cursor.execute(sql, params)
                    if cursor.description:
                        cursor.fetchall()
            else:
                cursor.execute(op[0].upper())
        return time.perf_counter() - started
    finally:
        conn.close()


SNAPSHOT = "bench_replay_snapshot"


def snapshot(q: Any) -> None:
    """Keep the live table's rows, to put them back before each run."""
    q(f"DROP TABLE IF EXISTS {SNAPSHOT}")
    q(f"CREATE TABLE {SNAPSHOT} AS SELECT * FROM prescient_futurejob")


def restore(q: Any) -> None:
    """The live table as snapshotted (same ids), the history empty, both vacuumed."""
    q("TRUNCATE prescient_futurejob, prescient_jobhistory RESTART IDENTITY")
    q(f"INSERT INTO prescient_futurejob SELECT * FROM {SNAPSHOT}")
    q("VACUUM ANALYZE prescient_futurejob")
    q("VACUUM ANALYZE prescient_jobhistory")


def outcome(q: Any) -> tuple[int, int, int]:
    """(jobs left, of them re-scheduled, history rows): what a tick or its replay did."""
    left, later = q("SELECT count(*), count(*) FILTER (WHERE check_count > 0) FROM prescient_futurejob")[0]
    return left, later, q("SELECT count(*) FROM prescient_jobhistory")[0][0]


def drop(q: Any) -> None:
    q(f"DROP TABLE IF EXISTS {SNAPSHOT}")


def measure(res: Any, sizes: dict[str, Any], *, q: Any, add_jobs: Any, clear_jobs: Any, tick: Any,
            now: datetime, due: datetime, log: Any) -> None:
    """``replay.tick`` and ``replay.floor`` (jobs per second), interleaved run by run."""
    count, runs = sizes["sweep"], sizes["runs"]
    clear_jobs()
    add_jobs(1, count, due)
    snapshot(q)
    try:
        restore(q)
        summary, recording = record(lambda: tick(now))
        assert summary.processed == count, summary.line()
        for run in range(runs):
            restore(q)
            started = time.perf_counter()
            summary = tick(now)
            seconds = time.perf_counter() - started
            assert summary.processed == count, summary.line()
            res.add("replay.tick", count / seconds)
            after_tick = outcome(q)
            restore(q)
            floor = replay(recording)
            assert outcome(q) == after_tick, f"the replay left {outcome(q)}, the tick {after_tick}"
            res.add("replay.floor", count / floor)
            log(f"replay run {run + 1}/{runs}: tick {count / seconds:,.0f}/s, its statements from plain "
                f"psycopg {count / floor:,.0f}/s ({recording.statements} statements)")
    finally:
        drop(q)
        clear_jobs()
