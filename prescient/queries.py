"""Read-only queries for the dashboard, the status and the metrics: counts computed in the database.

:class:`EpochBucket` numbers the fixed-length buckets a datetime falls in, counted from the
Unix epoch as slots are; :func:`bucket_counts` groups rows by bucket in one query.
:func:`figures` is what ``GET /prescient/metrics`` reports, each figure from an indexed query.
:func:`history_with_error` and :func:`history_with_exception` find finished jobs by their error
(the admin's ``error:`` and ``exception:`` searches, ``GET history?error=&exception=``);
:func:`entity_names` the names a bare key is looked up under (the admin's search box).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import NotSupportedError, connections
from django.db.models import Count, Func, IntegerField, Min, Q, QuerySet
from django.db.models.functions import Right
from django.db.models.lookups import Exact

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType

from prescient import slots
from prescient.conf import stale_after_seconds
from prescient.counting import EXACT_COUNT_LIMIT, counts, estimated_count
from prescient.models import FutureJob, JobHistory, Worker
from prescient.models.workers import given_name
from prescient.states import State


class EpochBucket(Func):
    """The index of the ``seconds``-long bucket a datetime falls in: ``floor(epoch seconds / seconds)``.

    Buckets are counted from the Unix epoch, as slots are, so buckets of whole slots line up
    with the slots. A chart is one ``GROUP BY`` on this, in the database (SQLite, PostgreSQL).
    """

    output_field = IntegerField()
    arity = 1

    def __init__(self, expression: Any, seconds: int) -> None:
        seconds = int(seconds)
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        self.seconds = seconds
        super().__init__(expression)

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> _AsSqlType:
        raise NotSupportedError(f"EpochBucket supports SQLite and PostgreSQL, not {connection.vendor}")

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any) -> _AsSqlType:
        # strftime('%s') of the text Django stores ("YYYY-MM-DD HH:MM:SS.ffffff", UTC) without
        # its fraction, which SQLite would round to the millisecond (10:14:59.9999 -> 10:15);
        # integer division floors. '%' is doubled for this template and for the backend.
        template = (
            "(CAST(strftime('%%%%s', substr(%(expressions)s, 1, 19)) AS INTEGER) / " + str(self.seconds) + ")"
        )
        return super().as_sql(compiler, connection, template=template, **extra_context)

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        template = "CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / " + str(self.seconds) + ") AS BIGINT)"
        return super().as_sql(compiler, connection, template=template, **extra_context)


def bucket_counts(
    queryset: QuerySet[Any], field_name: str, start: datetime, minutes: int, key: str, *, only: str | None = None,
    sample_percent: float | None = None,
) -> dict[tuple[int, str], int]:
    """``{(bar, value of key): count}`` for the rows of ``queryset``, in one GROUP BY.

    ``bar`` counts ``minutes``-long buckets from ``start`` (itself a bucket boundary). ``only``:
    the one value ``key`` has in ``queryset`` (its filter says so): the rows are then grouped by
    bucket alone, which an index of ``field_name`` answers without reading the table (at ten
    million jobs, a day of the due chart in 0.1 s rather than 1 s). ``sample_percent``
    (PostgreSQL): count that share of the table's pages (``TABLESAMPLE SYSTEM``) and scale up:
    an estimate, for a range too large to count (see :func:`sample_percent`).
    """
    seconds = minutes * 60
    first = int((start - slots.EPOCH).total_seconds()) // seconds
    rows = queryset.order_by().annotate(bucket=EpochBucket(field_name, seconds))
    if only is not None:
        return {(int(bucket) - first, only): n
                for bucket, n in rows.values("bucket").annotate(n=Count("pk")).values_list("bucket", "n")}
    grouped = rows.values("bucket", key).annotate(n=Count("pk"))
    if sample_percent is not None:
        return {(int(bucket) - first, value): round(n * 100 / sample_percent)
                for bucket, value, n in _sampled(grouped.values_list("bucket", key, "n"), sample_percent)}
    return {(int(row["bucket"]) - first, row[key]): row["n"] for row in grouped}


#: Rows a range may hold before a chart samples it (PostgreSQL): what counting them costs under
#: a tenth of a second; a sample reads about as many.
SAMPLE_ABOVE = 200_000


def sample_percent(queryset: QuerySet[Any]) -> float | None:
    """The share of the table's pages to read for about :data:`SAMPLE_ABOVE` of its rows, when
    the planner expects ``queryset`` to hold more than that (PostgreSQL); None: count them all."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    expected = estimated_count(queryset)
    if expected <= SAMPLE_ABOVE:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [queryset.model._meta.db_table])
        row = cursor.fetchone()
    table_rows = max(float(row[0]) if row else 0.0, float(expected))
    return max(0.01, min(100.0, 100.0 * SAMPLE_ABOVE / table_rows))


def _sampled(queryset: QuerySet[Any], percent: float) -> list[tuple[Any, ...]]:
    """The rows of ``queryset`` (on one table) computed over ``percent`` of its table's pages."""
    sql, params = queryset.query.sql_with_params()
    table = connections[queryset.db].ops.quote_name(queryset.model._meta.db_table)
    # The share is a number computed here, written out: no parameter to place among the others.
    sample = f"TABLESAMPLE SYSTEM ({float(percent):.6f}) REPEATABLE (0)"
    with connections[queryset.db].cursor() as cursor:
        # The table itself, not a column of it (``EXTRACT(EPOCH FROM "table"."column")``).
        cursor.execute(re.sub(f"FROM {re.escape(table)}(?!\\.)", f"FROM {table} {sample}", sql, count=1), params)
        return list(cursor.fetchall())


#: The most entity names :func:`entity_names` walks to; a table with more is not walked.
MAX_ENTITY_NAMES = 1000


def entity_names(queryset: QuerySet[Any]) -> list[str] | None:
    """The distinct ``entity_name`` of the queryset's table (the live jobs' or the history's),
    one index descent each: the next name past the last, by the index that leads with it (a
    "skip scan"; PostgreSQL 15 makes none itself). None past :data:`MAX_ENTITY_NAMES`.

    A search for a bare key looks it up under each name (``entity_name IN (…) AND entity_key =
    …``, an index lookup per name); the key alone is no index's leading column, and would be
    read off every row.
    """
    table = connections[queryset.db].ops.quote_name(queryset.model._meta.db_table)
    sql = (
        f"WITH RECURSIVE n(name) AS (SELECT (SELECT min(entity_name) FROM {table}) UNION ALL "
        f"SELECT (SELECT min(t.entity_name) FROM {table} t WHERE t.entity_name > n.name) FROM n "
        "WHERE n.name IS NOT NULL) SELECT name FROM n WHERE name IS NOT NULL LIMIT %s"
    )
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, [MAX_ENTITY_NAMES + 1])
        names = [row[0] for row in cursor.fetchall()]
    return names if len(names) <= MAX_ENTITY_NAMES else None


def history_with_error(queryset: QuerySet[JobHistory], text: str) -> QuerySet[JobHistory]:
    """The rows whose last error contains ``text``, in any case; every row with an error when
    ``text`` is blank (spaces around it are ignored).

    A part of a text is no index lookup: narrow a search of a large history by check, outcome or
    date (the admin's list and the API read the rows newest first until a page is full).
    """
    text = text.strip()
    return queryset.filter(last_error__icontains=text) if text else queryset.exclude(last_error="")


def history_with_exception(queryset: QuerySet[JobHistory], name: str) -> QuerySet[JobHistory]:
    """The rows whose exception class is ``name``: its whole path (``builtins.TimeoutError``) or
    its last dotted parts (``TimeoutError``, ``carriers.CarrierDown``), never a part of a name;
    every row with an exception class when ``name`` is blank (spaces around it are ignored).

    Case counts, as in Python, on every database: the last parts are compared with ``=`` (SQLite's
    ``LIKE``, which ``endswith`` becomes there, ignores the case of ASCII letters; PostgreSQL's
    does not).
    """
    name = name.strip()
    if not name:
        return queryset.exclude(exception_class_path="")
    tail = f".{name}"
    return queryset.filter(
        Q(exception_class_path=name) | Q(Exact(Right("exception_class_path", len(tail)), tail))
    )


@dataclass
class WorkerFigure:
    #: Its unique name (new at each start), its host and the name it was given (stable).
    name: str
    host: str
    given_name: str
    #: The worker's host clock minus the database's, at its last heartbeat.
    clock_skew_seconds: float


@dataclass
class Figures:
    """What ``GET /prescient/metrics`` reports, as of ``now``."""

    now: datetime
    #: Live jobs per state (every state, zeros included).
    jobs: dict[str, int]
    #: Scheduled jobs whose time has come.
    due: int
    #: How late the oldest due job is (0 when none is due).
    oldest_overdue_seconds: float
    #: Workers that heart-beat within the stale period and have not stopped.
    workers: list[WorkerFigure]
    #: Counts that are the planner's estimate rather than exact ("jobs:<state>", "due").
    estimated: list[str] = field(default_factory=list)


def figures(now: datetime, *, exact_up_to: int = EXACT_COUNT_LIMIT) -> Figures:
    """The metrics as of ``now``: a few short indexed queries, none over the whole history.

    Jobs per state: one capped count per state (the partial index ``prescient_job_due`` for
    ``scheduled``, ``prescient_job_workflow`` for the others), the planner's estimate above
    ``exact_up_to`` on PostgreSQL, so a busy queue's millions are never counted one by one. Due
    jobs and the oldest one: ``prescient_job_due``. Workers: their own small table. (What ended
    is counted by the running totals, ``prescient_job_outcomes_total``; no history is read.)
    """
    due_jobs = FutureJob.objects.due(now)
    querysets = {f"jobs:{state}": FutureJob.objects.filter(state=state) for state in State.values}
    counted = counts({**querysets, "due": due_jobs}, exact_up_to)
    jobs = {state: counted[f"jobs:{state}"][0] for state in State.values}
    estimated = [name for name, (_n, exact) in counted.items() if not exact]
    oldest = due_jobs.order_by().aggregate(oldest=Min("next_check_at"))["oldest"]
    cutoff = now - timedelta(seconds=stale_after_seconds())
    workers = [
        WorkerFigure(name=name, host=host, given_name=given_name(name), clock_skew_seconds=skew)
        for name, host, skew in Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=cutoff)
        .order_by("name")
        .values_list("name", "hostname", "clock_skew_seconds")
    ]
    return Figures(
        now=now,
        jobs=jobs,
        due=counted["due"][0],
        oldest_overdue_seconds=0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()),
        workers=workers,
        estimated=estimated,
    )
