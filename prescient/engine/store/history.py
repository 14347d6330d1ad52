"""Pruning ``JobHistory``: expired rows deleted in small batches, one short statement each.

Each batch is one ``DELETE … WHERE id IN (SELECT id … WHERE outcome = o AND finished_at < c
ORDER BY outcome, finished_at LIMIT n)``: the sub-select walks the index
``prescient_hist_outcome`` (outcome, finished_at) from the oldest row of that outcome and stops
after ``n``, so a batch costs the same at ten thousand rows as at ten million, and its
transaction (the statement's own in autocommit) is over in milliseconds. Nothing else touches
history rows once written, so a batch waits on no lock.

The outcome is written as a range (``outcome >= o AND outcome <= o``), not ``=``: with ``=``
PostgreSQL drops ``outcome`` from the ORDER BY as a constant, and then often prefers the index
of ``finished_at`` alone, expecting the outcome to be spread evenly in time. It is not: once
completed rows are pruned after 14 days and the others after 90, every row older than 14 days
is of another outcome, and each batch of completed rows walked past all of them first (measured
on 2,000,000 rows with 200,000 such: 412 ms a batch, against 7 ms on the composite index). The
range keeps ``outcome`` in the order, which only the composite index gives without a sort.

A DELETE leaves its rows' index entries behind until the table is vacuumed, and a scan from the
start of the range steps over them all: the last, empty batch of a million-row prune took
447 ms. Each batch therefore returns the newest ``finished_at`` it deleted, and the next one
starts there (``after``): a batch reads only live entries, however many it follows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.utils.dateparse import parse_datetime

from prescient.models import JobHistory

from .. import bulk


def prune_history(
    outcome: str, before: datetime, limit: int, *, after: datetime | None = None
) -> tuple[int, datetime | None]:
    """Delete up to ``limit`` history rows of ``outcome`` that finished before ``before`` (and
    at or after ``after``), the oldest first, in one statement; returns how many, and the newest
    ``finished_at`` among them (where the next batch may start; None if none was deleted or
    this database cannot say)."""
    if limit <= 0:
        raise ValueError(f"limit must be > 0, got {limit!r}")
    expired = JobHistory.objects.filter(outcome__gte=outcome, outcome__lte=outcome, finished_at__lt=before)
    if after is not None:
        expired = expired.filter(finished_at__gte=after)
    expired = expired.order_by("outcome", "finished_at")  # the composite index (see above)
    pick_sql, pick_params = expired.values("pk")[:limit].query.sql_with_params()
    meta = JobHistory._meta
    qn = connection.ops.quote_name
    assert meta.pk is not None
    sql = f"DELETE FROM {qn(meta.db_table)} WHERE {bulk.quote_column(meta.pk)} IN ({pick_sql})"
    with connection.cursor() as cursor:
        if not connection.features.can_return_columns_from_insert:  # no RETURNING (SQLite < 3.35)
            cursor.execute(sql, pick_params)
            return max(int(cursor.rowcount), 0), None
        cursor.execute(f"{sql} RETURNING {qn('finished_at')}", pick_params)
        stamps = [_aware(row[0]) for row in cursor.fetchall()]
    return len(stamps), max(stamps, default=None)


def _aware(value: Any) -> datetime:
    """A ``finished_at`` as the driver returned it (SQLite: text in UTC), as an aware datetime."""
    if isinstance(value, str):
        parsed = parse_datetime(value)
        assert parsed is not None, value
        value = parsed
    assert isinstance(value, datetime)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
