"""The sweep: claim due jobs, prepare them, run each through its kind, settle the outcomes.

*claim* marks a batch of due rows ``reserved`` in one statement (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so concurrent ticks and workers take disjoint batches); *prepare* asks each kind
for what its jobs need in bulk (checks: their entities); *run* calls the kind for each job
under its timeout; *settle* writes the results back in one transaction per batch, through the
transition table, guarded by the batch's reservation token. The sweep knows no kind by name:
it looks each job's kind up (:mod:`prescient.engine.kind`).
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import traceback
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from prescient import interrupts, telemetry
from prescient.checks import Check
from prescient.conf import stale_after_seconds
from prescient.exceptions import PrescientError
from prescient.models import FutureJob, Schedule
from prescient.states import Event

from . import store
from .decisions import Decision, TickSummary, describe, failure
from .kind import JobKind, get_kind

logger = logging.getLogger(__name__)

#: A lost or broken connection: the caller's to deal with (a worker's child reconnects and hands
#: back what had not run), never a job's failure.
DATABASE_DOWN = (OperationalError, InterfaceError)

#: Reservations made by prescient_worker start with this; a worker renews its leases while it
#: lives, so a stale one means the worker is gone and its claim can simply run again.
WORKER_TOKEN_PREFIX = "worker:"


def new_token(kind: str = "tick") -> str:
    """A reservation token unique to one claim."""
    return f"{kind}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


# --- the survey: all an idle tick costs ----------------------------------------------------------


class Survey(NamedTuple):
    """What one look at the live table found."""

    #: Some job is due.
    due: bool
    #: Some reservation is older than the stale period (the rescuer has work).
    stale: bool
    #: The database's time when it looked (None when not asked for).
    clock: datetime | None = None
    #: Some recurring schedule has an occurrence due.
    recurring: bool = False


def survey(now: datetime | None = None) -> Survey:
    """``(anything due, any stale reservation, the database's time)`` in one query, each EXISTS
    answered by its own index. Due means due at ``now``, or by the database's clock when
    ``now`` is None; staleness is always judged by the database's clock, so a replay's ``now``
    cannot make a live claim look stale.

    This is all an idle tick costs, however many jobs are pending.
    """
    stale_after = timedelta(seconds=stale_after_seconds())
    db = connections[DEFAULT_DB_ALIAS]  # the connection itself, not its proxy: looked up once
    if db.vendor == "postgresql":
        sql, params = _survey_statement(now, stale_after)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        assert row is not None
        clock = row[2] if row[2].tzinfo is not None else row[2].replace(tzinfo=UTC)
        return Survey(bool(row[0]), bool(row[1]), clock, bool(row[3]))
    clock = store.db_now()  # the host's, where the database runs on this host (no query)
    sql, params = _local_survey_statement(db, clock if now is None else now, clock - stale_after)
    with db.cursor() as cursor:
        if db.vendor == "sqlite" and not (db.queries_logged or db.execute_wrappers):
            # Django's SQLite cursor turns %s into ? in the whole text at every call: a quarter
            # of what this query costs. Its ? form is made once; where Django logs queries or
            # wraps their execution (DEBUG, tests counting queries), it goes through Django's.
            with db.wrap_database_errors:
                row = sqlite3.Cursor.execute(cursor.cursor, _qmark(sql), params).fetchone()
        else:
            cursor.execute(sql, params)
            row = cursor.fetchone()
    assert row is not None
    return Survey(bool(row[0]), bool(row[1]), clock, bool(row[2]))


@functools.cache
def _qmark(sql: str) -> str:
    """``sql`` with sqlite3's placeholders (``?``) for Django's (``%s``), as Django's SQLite cursor
    writes it."""
    return sql.replace("%s", "?").replace("%%", "%")


def _survey_sql(due_at: Any, cutoff: Any, clock_sql: str = "") -> tuple[str, list[Any]]:
    due_sql, due_params = FutureJob.objects.due(due_at).order_by().values("pk")[:1].query.sql_with_params()
    # Any old reservation, whatever its state: a superset of what the rescuer takes that
    # PostgreSQL plans in half the time (planning is most of what this query costs).
    stale = FutureJob.objects.in_flight().filter(reserved_at__lt=cutoff).order_by()
    stale_sql, stale_params = stale.values("pk")[:1].query.sql_with_params()
    recurring = Schedule.objects.due(due_at).order_by().values("pk")[:1]  # the prescient_schedule_due index
    rec_sql, rec_params = recurring.query.sql_with_params()
    return (
        f"SELECT EXISTS({due_sql}), EXISTS({stale_sql}){clock_sql}, EXISTS({rec_sql})",
        [*due_params, *stale_params, *rec_params],
    )


#: Values no caller passes, to find where ``now`` and the stale period go among the parameters.
_NOW_MARK = datetime(1999, 12, 31, 23, 59, 58, 123457, tzinfo=UTC)
_STALE_MARK = timedelta(days=9999, microseconds=424242)
_survey_cache: dict[tuple[str, bool], tuple[str, list[Any], list[int], int]] = {}


def _survey_statement(now: datetime | None, stale_after: timedelta) -> tuple[str, list[Any]]:
    """The survey's SQL on PostgreSQL (the clock read by the statement itself), compiled by the
    ORM once per connection and kind of ``now`` (compiling cost more than running it), with
    ``now`` and the stale period put in place."""
    key = (connection.alias, now is None)
    cached = _survey_cache.get(key)
    if cached is None:
        clock = Now()
        cutoff = ExpressionWrapper(clock - Value(_STALE_MARK), output_field=DateTimeField())
        due_at: Any = clock if now is None else _NOW_MARK
        sql, params = _survey_sql(due_at, cutoff, ", statement_timestamp()")
        due_field = FutureJob._meta.get_field("next_check_at")
        marked_now = due_field.get_db_prep_value(_NOW_MARK, connection)
        now_at = [i for i, p in enumerate(params) if p == marked_now]
        stale_at = [i for i, p in enumerate(params) if p == _STALE_MARK]
        if len(stale_at) != 1 or len(now_at) != (0 if now is None else 2):  # not the shape expected
            raise RuntimeError(f"prescient: unexpected survey statement {sql!r} {params!r}")
        cached = _survey_cache[key] = (sql, params, now_at, stale_at[0])
    sql, params, now_indexes, stale_index = cached
    params = list(params)
    for now_index in now_indexes:  # due jobs, due schedules
        params[now_index] = FutureJob._meta.get_field("next_check_at").get_db_prep_value(now, connection)
    params[stale_index] = stale_after
    return sql, params


#: Likewise for the cut-off of stale reservations, where the statement is given it (SQLite).
_CUTOFF_MARK = datetime(1999, 12, 31, 23, 59, 57, 654321, tzinfo=UTC)
_local_cache: dict[str, tuple[str, list[Any], list[int], list[int]]] = {}


def _local_survey_statement(db: BaseDatabaseWrapper, due_at: datetime, cutoff: datetime) -> tuple[str, list[Any]]:
    """The survey's SQL elsewhere (SQLite: ``now`` and the cut-off given by this process),
    compiled once per connection as on PostgreSQL (compiling its three sub-queries cost ten
    times more than SQLite takes to answer them from their indexes), its constants inlined and
    its columns unqualified (each sub-query reads one table; Django's SQLite cursor rewrites the
    placeholders of the whole text at each run, and that rewrite was a fifth of the cost)."""
    adapt = db.ops.adapt_datetimefield_value  # the times are aware datetimes: no field's checks needed
    cached = _local_cache.get(db.alias)
    if cached is None:
        sql, params = _survey_sql(_NOW_MARK, _CUTOFF_MARK)
        for model in (FutureJob, Schedule):
            sql = sql.replace(f"{db.ops.quote_name(model._meta.db_table)}.", "")
        marked_now, marked_cutoff = adapt(_NOW_MARK), adapt(_CUTOFF_MARK)
        now_at = [i for i, p in enumerate(params) if p == marked_now]
        cutoff_at = [i for i, p in enumerate(params) if p == marked_cutoff]
        pieces = sql.split("%s")
        if len(now_at) != 2 or len(cutoff_at) != 1 or len(pieces) != len(params) + 1:  # not the shape expected
            raise RuntimeError(f"prescient: unexpected survey statement {sql!r} {params!r}")
        # The constants (the state, the empty token) as literals: compared with a parameter, the
        # predicate of a partial index makes SQLite plan the statement anew at each run.
        kept = set(now_at) | set(cutoff_at)
        sql = pieces[0] + "".join(
            ("%s" if i in kept else _literal(param)) + piece
            for i, (param, piece) in enumerate(zip(params, pieces[1:], strict=True))
        )
        now_at = [sorted(kept).index(i) for i in now_at]
        cutoff_at = [sorted(kept).index(i) for i in cutoff_at]
        params = [params[i] for i in sorted(kept)]
        cached = _local_cache[db.alias] = (sql, params, now_at, cutoff_at)
    sql, params, now_indexes, cutoff_indexes = cached
    params = list(params)
    due_value, cutoff_value = adapt(due_at), adapt(cutoff)
    for index in now_indexes:  # due jobs, due schedules
        params[index] = due_value
    for index in cutoff_indexes:
        params[index] = cutoff_value
    return sql, params


def _literal(value: Any) -> str:
    """A constant of the survey (a state, the empty token) as an SQL string literal."""
    if not isinstance(value, str):  # the survey's constants are strings; anything else is a change to look at
        raise RuntimeError(f"prescient: unexpected constant {value!r} in the survey statement")
    return "'" + str.__str__(value).replace("'", "''") + "'"


# --- prepare and run ---------------------------------------------------------------------------


def definition_of(job: FutureJob) -> Check | None:
    """The registered definition of ``job`` (timeout, retries), or None when it is unknown."""
    try:
        return get_kind(job.kind).definition(job)
    except PrescientError:
        return None


class Unprepared:
    """The context of a job whose kind could not load what it needs: what that raised (a
    manager or model of the host's may raise anything)."""

    def __init__(self, exception: BaseException) -> None:
        self.exception = exception
        self.traceback = "".join(traceback.format_exception(exception))


def prepare(jobs: Sequence[FutureJob]) -> dict[int, Any]:
    """What each job needs to run, loaded in bulk by its kind: ``{job id: context}``."""
    by_kind: dict[str, list[FutureJob]] = defaultdict(list)
    for job in jobs:
        by_kind[job.kind].append(job)
    contexts: dict[int, Any] = {}
    for name, group in by_kind.items():
        try:
            kind = get_kind(name)
        except PrescientError:
            continue  # reported per job by run_one
        try:
            contexts.update(kind.prepare(group))
        except DATABASE_DOWN:
            raise  # the connection, not the jobs: the caller reconnects and hands them back
        except BaseException as exc:  # host code (a model's manager) ran: each job fails with it
            if interrupts.operator_signal():
                continue  # an operator's Ctrl-C: run_group hands every job back
            logger.error("loading what %s jobs of kind %s need raised %s", len(group), name, describe(exc))
            contexts.update((job.pk, Unprepared(exc)) for job in group)
    return contexts


def run_one(job: FutureJob, context: Any, now: datetime) -> Decision:
    """Run one claimed job through its kind and decide what follows (in an OpenTelemetry span,
    when ``opentelemetry-api`` is installed: :mod:`prescient.telemetry`).

    Whatever happens, the result is a decision: a kind that raises (it should not: its run
    goes through :func:`prescient.engine.runner.call`) fails the job with what it raised."""
    with telemetry.run_span(job) as span:
        try:
            kind: JobKind = get_kind(job.kind)
        except PrescientError as exc:
            decision = failure(Decision(job=job, event=Event.FINISH), None, describe(exc), now, exception=exc)
        else:
            if isinstance(context, Unprepared):
                decision = failure(
                    Decision(job=job, event=Event.FINISH), definition_of(job), describe(context.exception), now,
                    exception=context.exception, traceback=context.traceback,
                )
            else:
                try:
                    decision = kind.run(job, context, now)
                except DATABASE_DOWN:
                    raise  # the connection, not the job: the caller reconnects and hands it back
                except BaseException as exc:  # the backstop: never lose a job, nor stop the process
                    if isinstance(exc, KeyboardInterrupt) and interrupts.operator_signal():
                        decision = hand_back(job)  # the operator's, not the job's
                    else:
                        logger.exception("job id=%s: its kind %r raised", job.pk, job.kind)
                        decision = failure(
                            Decision(job=job, event=Event.FINISH, ran=True), definition_of(job), describe(exc), now,
                            exception=exc, traceback="".join(traceback.format_exception(exc)),
                        )
        _spread(decision)
        span.record(decision)
    return decision


def _spread(decision: Decision) -> None:
    """A re-check, a retry or a release of a check that spreads its slot starts at its job's
    offset into the slot, as its first run did (a catch-up keeps it too)."""
    due = decision.next_check_at
    if due is None or decision.event not in (Event.RESCHEDULE, Event.RETRY, Event.HAND_BACK):
        return
    definition = definition_of(decision.job)
    if definition is not None and definition.spread is not None:
        job = decision.job
        decision.next_check_at = definition.spread_at(due, job.entity_name, job.entity_key)


def failed_run(job: FutureJob, exception: BaseException, now: datetime, seconds: float = 0.0) -> Decision:
    """The decision for a run that failed outside the job's own control: its process died
    (:class:`~prescient.exceptions.ChildDied`), or was killed on overrunning
    (:class:`~prescient.exceptions.CheckTimeout`)."""
    decision = failure(
        Decision(job=job, event=Event.FINISH, seconds=seconds, ran=True), definition_of(job), describe(exception),
        now, exception=exception,
    )
    try:
        get_kind(job.kind).after_failed_run(decision, now)
    except PrescientError:
        pass
    except BaseException:  # host code (a task's signal receivers), here in a worker's main process
        logger.exception("job id=%s: what follows its failed run raised; the failure stands", job.pk)
    _spread(decision)
    return decision


def hand_back(job: FutureJob) -> Decision:
    """The decision for a claim returned unstarted (or unfinished) by a stopping worker."""
    return Decision(job=job, event=Event.HAND_BACK)


def run_group(
    jobs: Sequence[FutureJob], token: str, now: datetime, *, started: bool = False,
    before_run: Callable[[FutureJob], None] | None = None,
) -> Iterator[Decision]:
    """Start a group of jobs reserved under ``token`` (one statement makes them ``running``),
    load what they need (one query per kind), then run them one after the other; yields each
    one's decision, in order. ``started``: the claim started them already.

    A job taken away from the claim before its start (paused, killed, slept or rescued while
    ``reserved``) is handed back unstarted: its code never runs. A started job runs: it is
    ``running``, and a pause, kill or sleep that arrives now applies when its run ends
    (``job.should_stop()`` tells a check that looks). Only a stopping worker
    (:func:`prescient.interrupts.ask_all`) hands back the started jobs not yet called.
    ``before_run(job)`` is called just before each run.
    """
    ok = {job.pk for job in jobs} if started else store.start_runs(jobs, token)
    contexts = prepare([job for job in jobs if job.pk in ok])
    for job in jobs:
        if job.pk not in ok or interrupts.stopping_all():
            yield hand_back(job)
            continue
        if before_run is not None:
            before_run(job)
        yield run_one(job, contexts.get(job.pk), now)


#: Seconds of work started at once. Runs are started (one statement) and their entities loaded
#: (one query) in groups, as many jobs as the runs so far say take about this long: a group of
#: one for slow checks, a whole batch for fast ones. A job of a group waits at most this long
#: between its start (``running``, its lease, its fresh entity) and its run.
GROUP_SECONDS = 0.1


class Pacer:
    """How many jobs to start at once, judged by how long the runs so far took (a moving
    average): about :data:`GROUP_SECONDS` of work; one at first, then at most twice as many
    as have run."""

    def __init__(self, budget: float = GROUP_SECONDS) -> None:
        self.budget = budget
        self.mean = 0.0
        self.runs = 0

    def record(self, decision: Decision) -> None:
        """Count one run's time (runs that never started say nothing)."""
        if decision.ran:
            seconds = decision.seconds
            self.mean = seconds if not self.runs else 0.8 * self.mean + 0.2 * seconds
            self.runs += 1

    def size(self, most: int) -> int:
        """The size of the next group, 1 to ``most``."""
        size = min(max(1, 2 * self.runs), int(self.budget / max(self.mean, 1e-6)))
        return max(1, min(most, size))


def timeout_of(job: FutureJob) -> float:
    """Seconds one run of ``job`` may take (0 when its kind or definition is unknown)."""
    try:
        return get_kind(job.kind).timeout(job)
    except PrescientError:
        return 0.0


#: Seconds a lease outlives its job's timeout before the claim is presumed lost.
LEASE_MARGIN = 60.0


def lease_seconds(job: FutureJob) -> float:
    """How long a claim of ``job`` may go unrenewed before it is stale: the stale period, or
    the job's own timeout plus a margin when that is longer (a healthy run is never stale)."""
    return max(stale_after_seconds(), timeout_of(job) + LEASE_MARGIN)


# --- one batch ---------------------------------------------------------------------------------


def sweep_batch(
    now: datetime, size: int, summary: TickSummary, *,
    watch: Callable[[str, FutureJob | None], None] | None = None, decisions: list[Decision] | None = None,
    pacer: Pacer | None = None, ran: set[int] | None = None,
) -> int:
    """Claim, run and settle one batch of up to ``size`` due jobs in this process; returns how
    many were claimed (0: nothing was due). Runs start, and their entities load, in groups
    just before they are called (``pacer`` sizes the groups). ``watch(token, job)`` is told
    which job runs (None: the batch is over): the tick's guard renews the batch's leases and
    watches for a run that will not stop. The batch's decisions are gathered in ``decisions``
    (a new list if not given). ``ran``: the jobs this pass has run already, kept up to date: one
    claimed again (its retry came due at once) is handed back unrun, so that a pass runs each
    job at most once and ends; returns how many it ran then."""
    token = new_token()
    pacer = Pacer() if pacer is None else pacer
    # Checks fast enough for the whole batch to be one group: the claim starts them too.
    whole = pacer.size(size) >= size
    jobs = store.claim(now, size, token, start=whole)
    if not jobs:
        return 0
    decisions = [] if decisions is None else decisions
    if ran is not None:
        decisions.extend(hand_back(job) for job in jobs if job.pk in ran)
        jobs = [job for job in jobs if job.pk not in ran]
        ran.update(job.pk for job in jobs)

    def before_run(job: FutureJob) -> None:
        if watch is not None:
            watch(token, job)

    try:
        done = 0
        while done < len(jobs):
            group = jobs if whole else jobs[done:done + pacer.size(len(jobs) - done)]
            done += len(group)
            for decision in run_group(group, token, now, started=whole, before_run=before_run):
                decisions.append(decision)
                pacer.record(decision)
    finally:
        if watch is not None:
            watch(token, None)
        interrupts.forget(token)
    store.settle(decisions, token, now, summary)
    return len(jobs)
