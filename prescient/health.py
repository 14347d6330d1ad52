"""Health per check over a recent window (the past hour by default): runs per minute, failure
rate, run duration p50/p95, last error, pending jobs and the most overdue one. One read shared by
the admin's dashboard, ``GET health/checks`` and ``prescient_status``.

From the history, the jobs of each check that finished in the window (by ``finished_at``):

- **runs**: their runs (``run_count``), counted when the job ended (a job that re-checked for a
  day counts its runs then); **runs per minute**: runs over the window's minutes;
- **failure rate**: failed runs (``failure_count``, retried ones included) over runs;
- **finished**, and **failed**: those that ended ``failed``;
- **run duration p50/p95**: each job's time per run (``total_run_seconds / run_count``, jobs that
  ran), interpolated as PostgreSQL's ``percentile_cont``, over each check's latest :data:`SAMPLE`
  jobs of the window (all of them, up to that many): on PostgreSQL in the aggregate's statement
  (``percentile_cont`` over an index range per check), elsewhere in Python. At a hundred million
  history rows a week, an hour holds 600,000 jobs, and sorting them all for the percentiles took
  1.6 s on a loaded machine; the counts alone, 0.4 s;
- **last error**: the newest row with an error (``last_error``), whatever its outcome.

From the live table, every job of the check, whatever the window: **pending** (any state), **due**
(scheduled, its time come), **oldest overdue**: how late the most overdue of those is, and
**held**: of those, the ones a full limit or an empty rate bucket holds back (per limit or rate,
as :func:`prescient.limits.held_counts` judges them; rates by the database's clock).

A check with neither a job finished in the window nor a pending job is not listed. A fixed number
of queries, whatever the number of checks: an aggregate per table, the last errors, (not on
PostgreSQL) the sample of durations, and where a limit or rate is declared the held jobs (three).
Beyond 100,000 live jobs (PostgreSQL), the live table is never read whole: pending is the
planner's estimate per check, due and oldest overdue come from an index, each due count exact up
to 10,000, beyond that an estimate (``due_estimated``; an ``EXPLAIN`` per such check).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Count, F, Min, Q, Sum, Window
from django.db.models.functions import RowNumber

from . import counting, limits
from .clock import db_now
from .models import FutureJob, JobHistory
from .states import Outcome, State

#: The window when none is asked for, in minutes: the past hour.
DEFAULT_MINUTES = 60
#: The longest window: a week.
MAX_MINUTES = 7 * 24 * 60
#: Jobs read per check for its percentiles, newest first: a bound on the rows read and sorted,
#: whatever the traffic.
SAMPLE = 10_000
#: Live jobs counted per check exactly, at most; beyond, pending is the planner's estimate.
EXACT_PENDING = 100_000
#: Beyond :data:`EXACT_PENDING` live jobs, due jobs counted per check exactly, at most; beyond,
#: the planner's estimate (``due_estimated``), as the status counts them.
EXACT_DUE = counting.EXACT_COUNT_LIMIT
#: Characters of an error's text kept in the report (the history row has all of it).
ERROR_CHARS = 500


@dataclass
class LastError:
    #: The history row's id (its admin page, ``GET history?…``).
    history_id: int
    finished_at: str
    outcome: str
    #: The exception's class as ``module.Name``; empty when not known.
    exception_class: str
    #: The error's text (its first :data:`ERROR_CHARS` characters).
    error: str
    entity_name: str
    entity_key: str


@dataclass
class CheckHealth:
    name: str
    finished: int = 0
    #: Ended ``failed``.
    failed: int = 0
    runs: int = 0
    failed_runs: int = 0
    runs_per_minute: float = 0.0
    #: Failed runs over runs; None when nothing ran.
    failure_rate: float | None = None
    #: Time per run of the window's jobs, in seconds; None when none ran.
    run_seconds_p50: float | None = None
    run_seconds_p95: float | None = None
    last_error: LastError | None = None
    #: Live jobs, any state.
    pending: int = 0
    #: Whether ``pending`` is PostgreSQL's estimate (beyond 100,000 live jobs), not a count.
    pending_estimated: bool = False
    #: Scheduled jobs whose time has come.
    due: int = 0
    #: Whether ``due`` is PostgreSQL's estimate (beyond 100,000 live jobs and 10,000 due), not a count.
    due_estimated: bool = False
    #: How late the most overdue of those is, in seconds; None when none is due.
    oldest_overdue_seconds: float | None = None
    #: Of the due jobs, those a full limit or an empty rate bucket holds back (prescient.limits).
    held: int = 0
    #: The same, per limit or rate (by name).
    held_by: dict[str, int] = field(default_factory=dict)


@dataclass
class Health:
    #: The window: ``minutes`` before ``until``, ISO 8601.
    minutes: int
    since: str
    until: str
    #: By name.
    checks: list[CheckHealth]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile_cont(values: Sequence[float], fraction: float) -> float | None:
    """The percentile as PostgreSQL's ``percentile_cont`` computes it: linear interpolation
    between the two closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def health(
    now: datetime | None = None, *, minutes: int = DEFAULT_MINUTES, names: Collection[str] | None = None
) -> Health:
    """The health of each check (or of ``names`` among them) over the ``minutes`` before ``now``
    (default: the database's time); see the module's docstring."""
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"minutes must be from 1 to {MAX_MINUTES}, got {minutes}")
    now = now or db_now()
    since = now - timedelta(minutes=minutes)
    finished = JobHistory.objects.filter(finished_at__gt=since, finished_at__lte=now).order_by()
    live = FutureJob.objects.order_by()
    if names is not None:
        finished, live = finished.filter(job_exec__in=list(names)), live.filter(job_exec__in=list(names))
    reports: dict[str, CheckHealth] = {}

    def report(name: str) -> CheckHealth:
        return reports.setdefault(name, CheckHealth(name=name))

    postgres = connections[finished.db].vendor == "postgresql"
    counted = finished.values("job_exec").annotate(
        n=Count("id"), failed=Count("id", filter=Q(outcome=Outcome.FAILED)),
        runs=Sum("run_count"), failed_runs=Sum("failure_count"),
    )
    # Typed loosely: the percentiles are there on PostgreSQL only.
    totals: Iterable[Mapping[str, Any]] = _with_latest_percentiles(counted, since, now) if postgres else counted
    for row in totals:
        entry = report(row["job_exec"])
        entry.finished, entry.failed = row["n"], row["failed"]
        entry.runs, entry.failed_runs = row["runs"] or 0, row["failed_runs"] or 0
        entry.runs_per_minute = round(entry.runs / minutes, 3)
        entry.failure_rate = round(entry.failed_runs / entry.runs, 4) if entry.runs else None
        if postgres:
            entry.run_seconds_p50, entry.run_seconds_p95 = _rounded(row["p50"]), _rounded(row["p95"])
    if not postgres and reports:
        _sample_percentiles(finished, reports)

    newest = Window(RowNumber(), partition_by=[F("job_exec")], order_by=[F("finished_at").desc(), F("id").desc()])
    errors = finished.exclude(last_error="").annotate(rank=newest).filter(rank=1)
    for error in errors.values(
        "id", "job_exec", "finished_at", "outcome", "exception_class_path", "last_error", "entity_name", "entity_key"
    ):
        report(error["job_exec"]).last_error = LastError(
            history_id=error["id"], finished_at=error["finished_at"].isoformat(), outcome=error["outcome"],
            exception_class=error["exception_class_path"], error=error["last_error"][:ERROR_CHARS],
            entity_name=error["entity_name"], entity_key=error["entity_key"],
        )

    _live(live, now, report, names)
    if limits.declared():
        for name, held_by in limits.held_per_check(now, db_now(), None if names is None else list(names)).items():
            if name in reports:
                reports[name].held, reports[name].held_by = sum(held_by.values()), held_by
    return Health(
        minutes=minutes, since=since.isoformat(), until=now.isoformat(),
        checks=[reports[name] for name in sorted(reports)],
    )


def _live(live: Any, now: datetime, report: Callable[[str], CheckHealth], names: Collection[str] | None) -> None:
    """Pending, due and oldest overdue per check, from the live jobs ``live``.

    Exact, in one query (and on PostgreSQL a count that stops at :data:`EXACT_PENDING`), while
    there are at most that many. Beyond (ten million jobs: a ``GROUP BY`` over all of them took
    seconds), pending is PostgreSQL's estimate per check (``pending_estimated``), from the
    table's statistics, and due and oldest overdue are read per check from the
    ``prescient_job_check_due`` index (:func:`_due_per_check`), never a pass over the due jobs."""
    due = Q(state=State.SCHEDULED, next_check_at__lte=now)
    estimates = None
    if connections[live.db].vendor == "postgresql" and counting.capped_count(live, EXACT_PENDING) is None:
        estimates = counting.estimated_per_value(FutureJob, "job_exec", live.db)
    if estimates is None:  # every job counted (other databases, a table never analyzed)
        rows = live.order_by().values("job_exec").annotate(
            n=Count("id"), due=Count("id", filter=due), oldest=Min("next_check_at", filter=due)
        ).values_list("job_exec", "n", "due", "oldest")
        for name, pending, due_count, oldest in rows:
            entry = report(name)
            entry.pending, entry.due = pending, due_count
            if oldest is not None:
                entry.oldest_overdue_seconds = round((now - oldest).total_seconds(), 1)
        return
    oldest_due, due_counts = _due_per_check(live, now, names)
    # Each check with a job due, and each the statistics know (of ``names``, if given).
    listed = set(oldest_due) | {name for name in estimates if names is None or name in names}
    for name in listed:
        entry = report(name)
        entry.due, exact = due_counts.get(name, (0, True))
        entry.due_estimated = not exact
        entry.pending, entry.pending_estimated = max(estimates.get(name, 0), entry.due), True
        if name in oldest_due:
            entry.oldest_overdue_seconds = round((now - oldest_due[name]).total_seconds(), 1)


def _due_per_check(
    live: Any, now: datetime, names: Collection[str] | None
) -> tuple[dict[str, datetime], dict[str, tuple[int, bool]]]:
    """``({check: its oldest due time}, {check: (due jobs, exact)})`` of the checks with a job
    due, on PostgreSQL, bounded whatever the number of due jobs (#36: a ``GROUP BY`` over a
    backlog of 666,000 due jobs took 1.1 s):

    - one walk of ``prescient_job_check_due`` (scheduled jobs by check, then due time), a step
      per check: each check's first scheduled job, due if its time has come;
    - one statement of counts that stop at :data:`EXACT_DUE` + 1 jobs each (the same index),
      then the planner's estimate for a check beyond (:func:`prescient.counting.counts`, one
      ``EXPLAIN`` each), marked ``due_estimated``."""
    connection_ = connections[live.db]
    table = connection_.ops.quote_name(FutureJob._meta.db_table)
    scheduled = f"state = '{State.SCHEDULED.value}'"  # a constant: the partial index's predicate
    with connection_.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE walk(job_exec, first_at) AS ("
            f"(SELECT job_exec, next_check_at FROM {table} WHERE {scheduled} ORDER BY job_exec, next_check_at LIMIT 1)"
            f" UNION ALL SELECT n.job_exec, n.next_check_at FROM walk CROSS JOIN LATERAL ("
            f"SELECT job_exec, next_check_at FROM {table} WHERE {scheduled} AND job_exec > walk.job_exec"
            f" ORDER BY job_exec, next_check_at LIMIT 1) AS n"
            f") SELECT job_exec, first_at FROM walk WHERE first_at <= %s",
            [now],
        )
        oldest = {name: at for name, at in cursor.fetchall() if names is None or name in names}
    due = Q(state=State.SCHEDULED, next_check_at__lte=now)
    counted = counting.counts({name: live.filter(due, job_exec=name) for name in oldest}, exact_up_to=EXACT_DUE)
    return oldest, counted


def _with_latest_percentiles(counted: Any, since: datetime, now: datetime) -> list[dict[str, Any]]:
    """PostgreSQL: the rows of ``counted`` (the totals per check), each with ``p50`` and ``p95``
    of its check's latest :data:`SAMPLE` jobs of the window that ran, in one statement: an
    index range per check (``prescient_hist_check``), newest first, never the whole window."""
    try:
        sql, params = counted.query.sql_with_params()
    except EmptyResultSet:  # no check asked for (names=[])
        return []
    connection_ = connections[counted.db]
    qn = connection_.ops.quote_name
    table = qn(JobHistory._meta.db_table)
    latest = (
        f"SELECT h.{qn('total_run_seconds')} / h.{qn('run_count')} AS r FROM {table} h "
        f"WHERE h.{qn('job_exec')} = t.{qn('job_exec')} AND h.{qn('finished_at')} > %s "
        f"AND h.{qn('finished_at')} <= %s AND h.{qn('run_count')} > 0 ORDER BY h.{qn('finished_at')} DESC LIMIT %s"
    )
    statement = (
        f"SELECT t.*, p.p50, p.p95 FROM ({sql}) t LEFT JOIN LATERAL (SELECT percentile_cont(0.5) WITHIN GROUP "
        f"(ORDER BY s.r) AS p50, percentile_cont(0.95) WITHIN GROUP (ORDER BY s.r) AS p95 FROM ({latest}) s) p ON true"
    )
    with connection_.cursor() as cursor:
        cursor.execute(statement, [*params, since, now, SAMPLE])
        columns = [column[0] for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def _sample_percentiles(finished: Any, reports: dict[str, CheckHealth]) -> None:
    """p50 and p95 of each check's time per run, in Python, over its latest :data:`SAMPLE` jobs."""
    latest = finished.filter(run_count__gt=0).annotate(
        rank=Window(RowNumber(), partition_by=[F("job_exec")], order_by=[F("finished_at").desc(), F("id").desc()]),
    ).filter(rank__lte=SAMPLE)
    durations: dict[str, list[float]] = {}
    for name, seconds, runs in latest.values_list("job_exec", "total_run_seconds", "run_count"):
        durations.setdefault(name, []).append(seconds / runs)
    for name, values in durations.items():
        entry = reports[name]
        entry.run_seconds_p50 = _rounded(percentile_cont(values, 0.5))
        entry.run_seconds_p95 = _rounded(percentile_cont(values, 0.95))


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)
