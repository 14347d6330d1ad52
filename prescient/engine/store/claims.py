"""Claims: due jobs taken by a tick or a worker's child, their runs started, their leases renewed.

A claim marks due jobs ``reserved`` under a token unique to it, highest priority first, then
oldest first; the statement that starts their runs (:func:`start_runs`) makes them ``running``.
A claim may start the runs itself (``start=True``) when its runner calls them at once. A
reserved job that a person pauses, kills or sleeps is taken away from its claim on the spot
(:func:`take_back`): its code never runs.

On PostgreSQL a claim is one statement: the due jobs are picked with ``FOR UPDATE SKIP LOCKED``
(concurrent claims take disjoint jobs) on the ``prescient_job_claim`` index, one index range per
priority that has scheduled jobs (a recursive walk over the index's distinct priorities, so a
million jobs due later cost nothing), updated, and returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from prescient import limits
from prescient.clock import db_clock, db_now
from prescient.models import FutureJob
from prescient.states import State

from .. import bulk
from . import limited
from .inserting import can_insert_returning


def due_order(now: datetime, queues: list[str] | None) -> models.QuerySet[FutureJob]:
    """Due jobs in claim order: highest priority first, then oldest; of ``queues`` only, if given."""
    due = FutureJob.objects.due(now)
    if queues is not None:
        due = due.filter(queue__in=queues)
    return due.order_by("-priority", "next_check_at", "id")


def claim(
    now: datetime, limit: int, token: str, queues: list[str] | None = None, *, start: bool = False,
    held: list[float] | None = None,
) -> list[FutureJob]:
    """Mark up to ``limit`` due jobs ``reserved`` under ``token`` and return them in claim order
    (highest priority first, then oldest).

    ``queues``: only jobs of these queues (``""`` is the queue of checks). ``start``: their
    runs start now too (``running``, their leases and ``run_started_at`` stamped), for a claim
    whose runner calls them at once. ``held``: told, when due jobs were held back by a limit
    or rate, after how many seconds one may have room.
    """
    if limit <= 0:
        return []
    state = State.RUNNING if start else State.RESERVED
    if limits.declared():
        # Jobs under a limit or rate first (the database says which keys have room), then the
        # others for the rest of the claim, in one transaction: a fault between the two leaves
        # nothing claimed. Where no limit is declared, none of this is asked.
        with transaction.atomic():
            kept = limited.claim(due_order(now, queues), limit, token, state, held)
            rest = limit - len(kept)
            jobs = _claim_unlimited(now, rest, token, queues, state, apart=True) if rest > 0 else []
        return sorted([*kept, *jobs], key=lambda job: (-job.priority, job.next_check_at, job.pk))
    return _claim_unlimited(now, limit, token, queues, state, apart=False)


def _claim_unlimited(
    now: datetime, limit: int, token: str, queues: list[str] | None, state: str, *, apart: bool
) -> list[FutureJob]:
    """The claim of jobs under no limit (``apart``: jobs with keys are left to limited.claim)."""
    if connection.vendor == "postgresql":
        jobs = _claim_returning(now, limit, token, queues, state, apart=apart)
        jobs.sort(key=lambda job: (-job.priority, job.next_check_at, job.pk))
        return jobs
    due = due_order(now, queues)
    if apart:
        due = due.filter(limited.UNLIMITED)
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True)
    with transaction.atomic():
        # The ids are picked first, not in a sub-select of the UPDATE: PostgreSQL may re-run
        # such a sub-select for each row it updates, each run skipping the rows already
        # changed, and so claim far more than ``limit`` jobs.
        pks = list(due.values_list("pk", flat=True)[:limit])
        if not pks:
            return []
        clock = db_clock()
        claimed = FutureJob.objects.filter(pk__in=pks, state=State.SCHEDULED).update(
            state=state, reserved_at=clock, reserved_by=token, run_started_at=clock if state == State.RUNNING else None
        )
    if not claimed:
        return []
    # Only the jobs picked here: the same token may hold others (those limited.claim took in
    # this claim, or runs still going), which the caller has already or must not run again.
    return list(FutureJob.objects.filter(pk__in=pks, reserved_by=token).order_by("-priority", "next_check_at", "id"))


def _pick(now: datetime, limit: int, queues: list[str] | None, apart: bool = False) -> tuple[str, str, list[Any]]:
    """The ids to claim, locked (``FOR UPDATE SKIP LOCKED``): ``(CTEs it needs, its SELECT,
    parameters)``; ``apart``: not those under a limit or rate."""
    if queues is not None:  # the prescient_task_due index, queue by queue
        due_jobs = due_order(now, queues)
        if apart:
            due_jobs = due_jobs.filter(limited.UNLIMITED)
        sql, params = due_jobs.values("pk")[:limit].query.sql_with_params()
        return "", f"{sql} FOR UPDATE SKIP LOCKED", list(params)
    qn = connection.ops.quote_name
    table = qn(FutureJob._meta.db_table)
    pk = bulk.quote_column(FutureJob._meta.pk)
    state, priority, due = qn("state"), qn("priority"), qn("next_check_at")
    scheduled = f"{state} = %s"
    unlimited = f" AND {qn('limit_key')} = '' AND {qn('rate_key')} = ''" if apart else ""
    # Each priority that scheduled jobs have, highest first: one index probe per priority.
    priorities = (
        f"prio (p) AS ((SELECT {priority} FROM {table} WHERE {scheduled} ORDER BY {priority} DESC LIMIT 1) "
        f"UNION ALL SELECT (SELECT {priority} FROM {table} WHERE {scheduled} AND {priority} < prio.p "
        f"ORDER BY {priority} DESC LIMIT 1) FROM prio WHERE prio.p IS NOT NULL), "
    )
    # In each, the oldest due jobs, locked; of all of them, the first ``limit``. The walk ends
    # with a NULL (no lower priority): it is left out before the lateral, which for
    # ``priority = NULL`` read the whole due range and matched nothing (1 M due jobs: 150 ms a
    # claim, a worker at 250 jobs/s; bench ``scale`` section).
    pick = (
        f"SELECT c.pk FROM (SELECT p FROM prio WHERE p IS NOT NULL) AS prio CROSS JOIN LATERAL ("
        f"SELECT {pk} AS pk, {due} AS due FROM {table} WHERE {scheduled} AND {priority} = prio.p "
        f"AND {due} <= %s{unlimited} ORDER BY {due}, {pk} LIMIT %s FOR UPDATE SKIP LOCKED) c "
        f"ORDER BY prio.p DESC, c.due, c.pk LIMIT %s"
    )
    when = FutureJob._meta.get_field("next_check_at").get_db_prep_value(now, connection)
    scheduled_value = State.SCHEDULED.value
    return priorities, pick, [scheduled_value, scheduled_value, scheduled_value, when, limit, limit]


def _claim_returning(
    now: datetime, limit: int, token: str, queues: list[str] | None, state: str, *, apart: bool = False
) -> list[FutureJob]:
    # The picked ids are a MATERIALIZED CTE, evaluated exactly once (see claim()).
    ctes, pick_sql, pick_params = _pick(now, limit, queues, apart)
    meta = FutureJob._meta
    qn = connection.ops.quote_name
    table = qn(meta.db_table)
    columns = ", ".join(f"{table}.{bulk.quote_column(f)}" for f in meta.concrete_fields)
    started = "statement_timestamp()" if state == State.RUNNING else "NULL"
    sql = (
        f"WITH {'RECURSIVE ' if ctes else ''}{ctes}picked (pk) AS MATERIALIZED ({pick_sql}) "
        f"UPDATE {table} SET {qn('state')} = %s, {qn('reserved_at')} = statement_timestamp(), "
        f"{qn('reserved_by')} = %s, {qn('run_started_at')} = {started} "
        f"FROM picked WHERE {table}.{bulk.quote_column(meta.pk)} = picked.pk AND {table}.{qn('state')} = %s "
        f"RETURNING {columns}"
    )
    params = [*pick_params, state, token, State.SCHEDULED.value]
    return list(FutureJob.objects.raw(sql, params))


def start_runs(jobs: Sequence[FutureJob], token: str) -> set[int]:
    """Start the runs of ``jobs`` reserved under ``token``: ``running`` from this statement,
    their leases starting now (by the database's clock); returns the ids of those started and
    marks them so in memory. The others were taken away since the claim (paused, killed,
    slept, cancelled, rescued): their code must not run."""
    if not jobs:
        return set()
    qn = connection.ops.quote_name
    table = qn(FutureJob._meta.db_table)
    pk_column = bulk.quote_column(FutureJob._meta.pk)
    if connection.vendor == "postgresql":
        clock, clock_params = "statement_timestamp()", []
    else:
        clock, clock_params = "%s", [FutureJob._meta.get_field("reserved_at").get_db_prep_value(db_now(), connection)]
    ids = [job.pk for job in jobs]
    marks = ", ".join(["%s"] * len(ids))
    sql = (
        f"UPDATE {table} SET {qn('state')} = %s, {qn('run_started_at')} = {clock}, {qn('reserved_at')} = {clock} "
        f"WHERE {pk_column} IN ({marks}) AND {qn('reserved_by')} = %s AND {qn('state')} = %s"
    )
    params = [State.RUNNING.value, *clock_params, *clock_params, *ids, token, State.RESERVED.value]
    if can_insert_returning():
        with connection.cursor() as cursor:
            cursor.execute(f"{sql} RETURNING {pk_column}, {qn('run_started_at')}", params)
            stamps = {row[0]: _as_datetime(row[1]) for row in cursor.fetchall()}
    else:  # no RETURNING: update, then read what was started
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
            mine = FutureJob.objects.filter(pk__in=ids, reserved_by=token, state=State.RUNNING)
            stamps = dict(mine.values_list("pk", "run_started_at"))
    for job in jobs:
        if job.pk in stamps:
            job.state = State.RUNNING
            job.run_started_at = stamps[job.pk]  # the start of its run, for the start-lag metric
    return set(stamps)


def _as_datetime(value: Any) -> datetime | None:
    """A timestamp read by a raw cursor as the ORM would give it (SQLite returns text, naive UTC)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if isinstance(value, datetime) and settings.USE_TZ and timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value if isinstance(value, datetime) else None


def take_back(job: FutureJob, to: str) -> None:
    """Take a locked ``reserved`` job away from its claim, to state ``to`` (scheduled or paused,
    remembering ``scheduled``): its code never runs, nothing is counted or charged."""
    job.last_state = State.SCHEDULED if to == State.PAUSED else ""
    job.state = to
    job.reserved_by, job.reserved_at, job.run_started_at = "", None, None
    job.save(update_fields=["state", "last_state", "reserved_by", "reserved_at", "run_started_at", "next_check_at"])


def renew_leases(reserved_by: str, *, prefix: bool = False) -> int:
    """Stamp the claims of ``reserved_by`` (every token starting with it, with ``prefix``) as
    alive now, by the database's clock; returns how many.

    On PostgreSQL the rows are locked first, in primary-key order, skipping any that another
    transaction holds (``FOR NO KEY UPDATE SKIP LOCKED``), and only those are stamped: the
    renewal never waits for a row, so it is never part of a deadlock. One UPDATE over the rows
    in no set order deadlocked against a child settling some of the same rows (the heartbeat
    renews every claim of the worker while its children settle theirs). A row held at that
    instant is being settled, taken back or rescued: it no longer needs its lease, and if it
    does, the next heartbeat renews it, well within the stale period (W002).
    """
    lookup = "reserved_by__startswith" if prefix else "reserved_by"
    # Claimed rows only: they are read through their partial index (prescient_job_in_flight),
    # not by a scan of the whole live table at every heartbeat.
    mine = FutureJob.objects.filter(**{lookup: reserved_by}).exclude(reserved_by="")
    if connection.vendor != "postgresql":  # SQLite: one writer at a time, nothing to order
        return mine.update(reserved_at=db_clock())
    # The rows to stamp are a MATERIALIZED CTE, picked and locked exactly once (see claim()).
    pick_sql, params = mine.order_by("pk").values("pk").query.sql_with_params()
    table = connection.ops.quote_name(FutureJob._meta.db_table)
    pk = bulk.quote_column(FutureJob._meta.pk)
    sql = (
        f"WITH picked (pk) AS MATERIALIZED ({pick_sql} FOR NO KEY UPDATE SKIP LOCKED) "
        f"UPDATE {table} SET {connection.ops.quote_name('reserved_at')} = statement_timestamp() "
        f"FROM picked WHERE {table}.{pk} = picked.pk"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return max(int(cursor.rowcount), 0)
