"""Read-only queries for the dashboard, the status and the metrics: counts computed in the database.

:class:`EpochBucket` numbers the fixed-length buckets a datetime falls in, counted from the
Unix epoch as slots are; :func:`bucket_counts` groups rows by bucket in one query.
:func:`figures` is what ``GET /prescient/metrics`` reports, each figure from an indexed query.
:func:`history_with_error` and :func:`history_with_exception` find finished jobs by their error
(the admin's ``error:`` and ``exception:`` searches, ``GET history?error=&exception=``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
from prescient.models import FutureJob, JobHistory, Worker
from prescient.models.workers import given_name
from prescient.states import State

#: Rows counted one by one before a count becomes the planner's estimate (PostgreSQL only):
#: counting a million rows exactly takes longer than a scrape may (as Oban Met does).
EXACT_COUNT_LIMIT = 10_000


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
    queryset: QuerySet[Any], field_name: str, start: datetime, minutes: int, key: str
) -> dict[tuple[int, str], int]:
    """``{(bar, value of key): count}`` for the rows of ``queryset``, in one GROUP BY.

    ``bar`` counts ``minutes``-long buckets from ``start`` (itself a bucket boundary).
    """
    seconds = minutes * 60
    first = int((start - slots.EPOCH).total_seconds()) // seconds
    rows = (
        queryset.order_by()
        .annotate(bucket=EpochBucket(field_name, seconds))
        .values("bucket", key)
        .annotate(n=Count("pk"))
    )
    return {(int(row["bucket"]) - first, row[key]): row["n"] for row in rows}


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
        sql, part_params = queryset.order_by().values("pk")[: limit + 1].query.sql_with_params()
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS capped)")
        params.extend(part_params)
    with connections[db].cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return {name: (int(n) if n <= limit else None) for name, n in zip(querysets, row, strict=True)}


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


def counts(querysets: Mapping[str, QuerySet[Any]], exact_up_to: int = EXACT_COUNT_LIMIT) -> dict[str, tuple[int, bool]]:
    """``{name: (rows, exact)}``: exact up to ``exact_up_to`` rows (one statement for all), then
    the planner's estimate on PostgreSQL (never below what was counted), an exact count elsewhere."""
    out: dict[str, tuple[int, bool]] = {}
    for name, n in capped_counts(querysets, exact_up_to).items():
        queryset = querysets[name]
        if n is not None:
            out[name] = (n, True)
        elif connections[queryset.db].vendor != "postgresql":
            out[name] = (queryset.order_by().count(), True)
        else:
            out[name] = (max(estimated_count(queryset), exact_up_to + 1), False)
    return out


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
