"""Counts that never read a large table whole: exact up to a bound (a count that stops there),
PostgreSQL's planner estimate beyond it (``EXPLAIN``, ``pg_stats``). Shared by the metrics, the
status, each check's health, the dashboard and the admin's lists (#36: at ten million jobs an
exact ``COUNT(*)`` reads them all). Other databases count exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import IntegerField, QuerySet, Subquery

#: Rows counted one by one before a count becomes the planner's estimate (PostgreSQL only):
#: counting a million rows exactly takes longer than a scrape may (as Oban Met does).
EXACT_COUNT_LIMIT = 10_000


def capped_count(queryset: QuerySet[Any], limit: int) -> int | None:
    """How many rows ``queryset`` has, if at most ``limit``; None when it has more."""
    return capped_counts({"n": queryset}, limit)["n"]


def capped_counts(querysets: Mapping[str, QuerySet[Any]], limit: int) -> dict[str, int | None]:
    """How many rows each of ``querysets`` has, if at most ``limit`` (None when it has more),
    in one statement: ``SELECT (SELECT count(*) FROM (SELECT 1 … LIMIT limit + 1)), …``.

    Each count reads at most ``limit + 1`` index entries, however many rows match.
    """
    if not querysets:
        return {}
    parts: list[str] = []
    params: list[Any] = []
    db = next(iter(querysets.values())).db
    for queryset in querysets.values():
        try:
            sql, part_params = queryset.order_by().values("pk")[: limit + 1].query.sql_with_params()
        except EmptyResultSet:  # a filter that matches nothing (``__in=[]``)
            parts.append("(SELECT 0)")
            continue
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS capped)")
        params.extend(part_params)
    with connections[db].cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return {name: (int(n) if n <= limit else None) for name, n in zip(querysets, row, strict=True)}


class CappedCount(Subquery):
    """:func:`capped_counts`' count as an expression, for an annotation: how many rows
    ``queryset`` has (it may name the outer row with ``OuterRef``), counting at most
    ``limit + 1``: a value above ``limit`` means "more" (:func:`beyond` then says how many).
    Each row of the outer query reads at most ``limit + 1`` index entries."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) AS capped)"

    def __init__(self, queryset: QuerySet[Any], limit: int) -> None:
        super().__init__(queryset.order_by().values("pk")[: limit + 1], output_field=IntegerField())


def estimated_count(queryset: QuerySet[Any]) -> int:
    """The query planner's estimate of the rows of ``queryset`` (PostgreSQL, from the table's
    statistics); an exact count on other databases."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return queryset.order_by().count()
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def estimated_per_value(model: type[Any], column: str, using: str) -> dict[str, int] | None:
    """The planner's estimate of how many rows of ``model`` hold each common value of
    ``column``: PostgreSQL's statistics (``pg_stats.most_common_vals`` and their frequencies,
    times ``pg_class.reltuples``), one query, no row read. A value not among the common ones is
    absent. None where there are no statistics (other databases, a table never analyzed)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.most_common_vals::text::text[], s.most_common_freqs, c.reltuples "
            "FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename "
            "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname "
            "WHERE s.tablename = %s AND s.attname = %s AND s.schemaname = current_schema()",
            [model._meta.db_table, column],
        )
        row = cursor.fetchone()
    if row is None or row[2] is None or row[2] < 0:
        return None
    values, frequencies, rows = row
    return {value: round(frequency * rows) for value, frequency in zip(values or [], frequencies or [], strict=False)}


def beyond(queryset: QuerySet[Any], counted: int) -> tuple[int, bool]:
    """``(rows, exact)`` of ``queryset``, known to have more than ``counted`` rows: the planner's
    estimate (never below ``counted + 1``) on PostgreSQL, an exact count elsewhere."""
    if connections[queryset.db].vendor != "postgresql":
        return queryset.order_by().count(), True
    return max(estimated_count(queryset), counted + 1), False


def counts(querysets: Mapping[str, QuerySet[Any]], exact_up_to: int = EXACT_COUNT_LIMIT) -> dict[str, tuple[int, bool]]:
    """``{name: (rows, exact)}``: exact up to ``exact_up_to`` rows (one statement for all), then
    the planner's estimate on PostgreSQL (never below what was counted), an exact count elsewhere."""
    out: dict[str, tuple[int, bool]] = {}
    for name, n in capped_counts(querysets, exact_up_to).items():
        out[name] = (n, True) if n is not None else beyond(querysets[name], exact_up_to)
    return out
