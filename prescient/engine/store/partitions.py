"""The history table's time partitions on PostgreSQL (migration 0024): listed, made, dropped.

``prescient_jobhistory`` is ``PARTITION BY RANGE (finished_at)``, a partition per day or month
(``prescient_jobhistory_p20261129``, ``…_p202611``) and a DEFAULT partition that takes any row
no other partition covers. What partitions to make and which to drop is decided by
:mod:`prescient.maintenance.history_partitions`; the statements are here, with the other
writes of the history.

A partition is made as a table of its own ``LIKE`` the parent, then attached: ``ATTACH
PARTITION`` takes a SHARE UPDATE EXCLUSIVE lock on the parent, which lets jobs end and pages
read meanwhile (``CREATE TABLE … PARTITION OF`` would take ACCESS EXCLUSIVE). The DEFAULT
partition is locked (ACCESS EXCLUSIVE) and scanned by the attach: rows of the new range that
landed there are moved into the new table first, or the attach would fail.

A partition is dropped in two transactions: ``DETACH PARTITION`` (its rows leave the history at
once; ACCESS EXCLUSIVE on the parent for a moment, a change of the catalog only), then ``DROP
TABLE`` of the detached table, under no lock that a job's ending or a page waits for. One ``DROP
TABLE`` of the partition would hold the parent's lock while its files are removed: 1.46 s for
a day of ten million rows (bench ``prune``), every job's ending queued behind it. ``DETACH …
CONCURRENTLY`` would not lock the parent at all, but PostgreSQL refuses it on a table with a
DEFAULT partition. A table detached but not dropped (the process died between the two) is
dropped at the next pass (:func:`leftovers`). A lock that waits behind a long read would queue
every job's ending behind it, so each of these statements runs under ``lock_timeout``
(:data:`LOCK_TIMEOUT`): on a busy table it gives up, and the upkeep tries again at its next pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from django.db.backends.utils import CursorWrapper

TABLE = "prescient_jobhistory"
DEFAULT = f"{TABLE}_default"
#: The longest a partition's statement waits for its lock before giving up.
LOCK_TIMEOUT = "2s"
_BOUNDS = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")


class Busy(Exception):
    """A partition's lock was not granted within :data:`LOCK_TIMEOUT`; nothing was changed."""


@dataclass(frozen=True)
class Partition:
    """One partition: its table and its range ``[lower, upper)`` of ``finished_at``."""

    name: str
    lower: datetime
    upper: datetime


def partitioned() -> bool:
    """Whether the history table is partitioned (PostgreSQL after migration 0024)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        row = cursor.fetchone()
    return bool(row and row[0] == "p")


def partitions() -> list[Partition]:
    """The partitions with a range, the oldest first (the DEFAULT partition is not one of them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        match = _BOUNDS.search(bound or "")
        if match:  # DEFAULT, or MINVALUE/MAXVALUE (none of prescient's)
            found.append(Partition(name, _timestamp(match[1]), _timestamp(match[2])))
    return sorted(found, key=lambda p: p.lower)


def create(name: str, lower: datetime, upper: datetime) -> int:
    """Make the partition ``name`` for ``[lower, upper)`` (it must overlap none), moving into it
    the rows of that range that landed in the DEFAULT partition; returns how many moved. Raises
    :class:`Busy` when a lock was not granted in time."""
    qn = connection.ops.quote_name
    with _briefly() as cursor:
        cursor.execute(
            f"CREATE TABLE {qn(name)} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)"
        )
        moved = 0
        if _exists(cursor, DEFAULT):
            cursor.execute(f"LOCK TABLE {DEFAULT} IN ACCESS EXCLUSIVE MODE")
            columns = _columns(cursor)
            cursor.execute(
                f"WITH moved AS (DELETE FROM {DEFAULT} WHERE finished_at >= %s AND finished_at < %s "
                f"RETURNING {columns}) INSERT INTO {qn(name)} ({columns}) SELECT {columns} FROM moved",
                [lower, upper],
            )
            moved = max(int(cursor.rowcount), 0)
        cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {qn(name)} FOR VALUES FROM (%s) TO (%s)", [lower, upper])
    return moved


def outcomes(name: str) -> set[str]:
    """The outcomes of the rows in the partition ``name``: one index probe each (a skip scan
    on ``(outcome, finished_at)``), not a scan of its rows."""
    qn = connection.ops.quote_name(name)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE o(outcome) AS ((SELECT outcome FROM {qn} ORDER BY outcome LIMIT 1) UNION ALL "
            f"SELECT (SELECT h.outcome FROM {qn} h WHERE h.outcome > o.outcome ORDER BY h.outcome LIMIT 1) "
            "FROM o WHERE o.outcome IS NOT NULL) SELECT outcome FROM o WHERE outcome IS NOT NULL"
        )
        return {row[0] for row in cursor.fetchall()}


def rows(name: str) -> int:
    """About how many rows the partition ``name`` holds: the planner's count (``reltuples``, exact
    as of its last VACUUM or ANALYZE, which autovacuum runs on a partition once its rows stop
    changing), or, for a partition never analyzed, a count. Counting ten million rows takes
    seconds: longer than dropping them."""
    qn = connection.ops.quote_name(name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", [name])
        row = cursor.fetchone()
        if row is not None and row[0] >= 0:
            return int(row[0])
        cursor.execute(f"SELECT count(*) FROM {qn}")
        counted = cursor.fetchone()
    return int(counted[0]) if counted else 0


def drop(name: str) -> bool:
    """Drop the partition ``name`` and its rows (:func:`detach`, then :func:`discard`); False
    when the parent's lock was not granted within :data:`LOCK_TIMEOUT` (nothing dropped). Never
    the DEFAULT partition."""
    if not detach(name):
        return False
    discard(name)
    return True


def detach(name: str) -> bool:
    """Detach the partition ``name``: its rows leave the history table (ACCESS EXCLUSIVE on the
    parent, for a change of the catalog); False when that lock was not granted in time."""
    if name == DEFAULT:
        raise ValueError("the DEFAULT partition is never dropped")
    try:
        with _briefly() as cursor:
            if _exists(cursor, name):
                cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {connection.ops.quote_name(name)}")
    except Busy:
        return False
    return True


def discard(name: str) -> None:
    """Drop the table ``name``, a partition already detached: its files removed, under no lock
    of the history table. Busy (someone holds the detached table) leaves it to :func:`leftovers`."""
    try:
        with _briefly() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(name)}")
    except Busy:
        pass


def leftovers() -> list[str]:
    """Partitions detached and not dropped (a process that died between :func:`detach` and
    :func:`discard`): tables named as prescient names its partitions that are no partition."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relname ~ %s "
            "AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = %s::regclass) "
            "AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid) ORDER BY c.relname",
            [f"^{TABLE}_p[0-9]+$", TABLE],
        )
        return [row[0] for row in cursor.fetchall()]


@contextmanager
def _briefly() -> Iterator[CursorWrapper]:
    """A transaction (a savepoint within one) whose locks are waited for :data:`LOCK_TIMEOUT`
    at most; :class:`Busy` when one was not granted."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            yield cursor
    except DatabaseError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":  # lock_not_available
            raise Busy(str(exc)) from exc
        raise


def _exists(cursor: CursorWrapper, table: str) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
    row = cursor.fetchone()
    return bool(row and row[0])


def _columns(cursor: CursorWrapper) -> str:
    cursor.execute(
        "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        [TABLE],
    )
    row = cursor.fetchone()
    assert row is not None
    return str(row[0])


def _timestamp(text: str) -> datetime:
    """A bound as ``pg_get_expr`` writes it (``2026-11-01 00:00:00+00``), aware."""
    return datetime.fromisoformat(text)
