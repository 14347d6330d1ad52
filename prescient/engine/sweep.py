"""The sweep: claim due jobs, prepare them, run each through its kind, settle the outcomes.

*claim* marks a batch of due rows ``running`` in one statement (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so concurrent ticks and workers take disjoint batches); *prepare* asks each kind
for what its jobs need in bulk (checks: their entities); *run* calls the kind for each job
under its timeout; *settle* writes the results back in one transaction per batch, through the
transition table, guarded by the batch's reservation token. The sweep knows no kind by name:
it looks each job's kind up (:mod:`prescient.engine.kind`).
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection

from prescient.checks import Check
from prescient.conf import stale_after_seconds
from prescient.exceptions import PrescientError
from prescient.models import FutureJob
from prescient.states import Event

from . import store
from .decisions import Decision, TickSummary, failure
from .kind import JobKind, get_kind
from .runner import describe

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


def survey(now: datetime) -> Survey:
    """``(anything due, any stale reservation)`` in one query, each answered by its own index.

    This is all an idle tick costs, however many jobs are pending.
    """
    cutoff = now - timedelta(seconds=stale_after_seconds())
    sql, params = _survey_statement(now, cutoff)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    assert row is not None
    return Survey(bool(row[0]), bool(row[1]))


def _survey_sql(now: datetime, cutoff: datetime) -> tuple[str, list[Any]]:
    due_sql, due_params = FutureJob.objects.due(now).order_by().values("pk")[:1].query.sql_with_params()
    # Any old reservation, whatever its state: a superset of what the rescuer takes that
    # PostgreSQL plans in half the time (planning is most of what this query costs).
    stale = FutureJob.objects.in_flight().filter(reserved_at__lt=cutoff).order_by()
    stale_sql, stale_params = stale.values("pk")[:1].query.sql_with_params()
    return f"SELECT EXISTS({due_sql}), EXISTS({stale_sql})", [*due_params, *stale_params]


#: Two instants no caller passes, to find where ``now`` and the cutoff go among the parameters.
_NOW_MARK = datetime(1999, 12, 31, 23, 59, 58, 123457, tzinfo=UTC)
_CUTOFF_MARK = datetime(1999, 12, 31, 23, 59, 59, 654321, tzinfo=UTC)
_survey_cache: dict[tuple[str, str], tuple[str, list[Any], int, int]] = {}


def _survey_statement(now: datetime, cutoff: datetime) -> tuple[str, list[Any]]:
    """The survey's SQL, compiled by the ORM once per connection (compiling cost more than
    running it), with ``now`` and ``cutoff`` put in place."""
    due_field, stale_field = FutureJob._meta.get_field("next_check_at"), FutureJob._meta.get_field("reserved_at")
    key = (connection.alias, connection.vendor)
    cached = _survey_cache.get(key)
    if cached is None:
        sql, params = _survey_sql(_NOW_MARK, _CUTOFF_MARK)
        now_at = [i for i, p in enumerate(params) if p == due_field.get_db_prep_value(_NOW_MARK, connection)]
        cut_at = [i for i, p in enumerate(params) if p == stale_field.get_db_prep_value(_CUTOFF_MARK, connection)]
        if len(now_at) != 1 or len(cut_at) != 1:  # not the shape expected: compile every time
            return _survey_sql(now, cutoff)
        cached = _survey_cache[key] = (sql, params, now_at[0], cut_at[0])
    sql, params, now_index, cut_index = cached
    params = list(params)
    params[now_index] = due_field.get_db_prep_value(now, connection)
    params[cut_index] = stale_field.get_db_prep_value(cutoff, connection)
    return sql, params


# --- prepare and run ---------------------------------------------------------------------------


def definition_of(job: FutureJob) -> Check | None:
    """The registered definition of ``job`` (timeout, retries), or None when it is unknown."""
    try:
        return get_kind(job.kind).definition(job)
    except PrescientError:
        return None


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
        contexts.update(kind.prepare(group))
    return contexts


def run_one(job: FutureJob, context: Any, now: datetime) -> Decision:
    """Run one claimed job through its kind and decide what follows."""
    try:
        kind: JobKind = get_kind(job.kind)
    except PrescientError as exc:
        return failure(Decision(job=job, event=Event.FINISH), None, describe(exc), now)
    return kind.run(job, context, now)


def failed_run(job: FutureJob, error: str, now: datetime, seconds: float = 0.0) -> Decision:
    """The decision for a run that failed outside the job's own control (its process died or
    was killed on overrunning)."""
    decision = failure(Decision(job=job, event=Event.FINISH, seconds=seconds, ran=True), definition_of(job), error, now)
    try:
        get_kind(job.kind).after_failed_run(decision, now)
    except PrescientError:
        pass
    return decision


def hand_back(job: FutureJob) -> Decision:
    """The decision for a claim returned unstarted (or unfinished) by a stopping worker."""
    return Decision(job=job, event=Event.HAND_BACK)


def timeout_of(job: FutureJob) -> float:
    """Seconds one run of ``job`` may take (0 when its kind or definition is unknown)."""
    try:
        return get_kind(job.kind).timeout(job)
    except PrescientError:
        return 0.0


# --- one batch ---------------------------------------------------------------------------------


def sweep_batch(
    now: datetime, size: int, summary: TickSummary, *, before_each: Callable[[str], None] | None = None
) -> int:
    """Claim, prepare, run and settle one batch of up to ``size`` due jobs in this process;
    returns how many were claimed (0: nothing was due). ``before_each(token)`` is called
    before each run (the tick renews its leases there)."""
    token = new_token()
    jobs = store.claim(now, size, token)
    if not jobs:
        return 0
    contexts = prepare(jobs)
    decisions = []
    for job in jobs:
        if before_each is not None:
            before_each(token)
        decisions.append(run_one(job, contexts.get(job.pk), now))
    store.settle(decisions, token, now, summary)
    return len(jobs)
