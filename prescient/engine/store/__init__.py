"""The one writer: every INSERT, UPDATE and DELETE of ``FutureJob`` and ``JobHistory``.

Verbs, kinds, the worker and the upkeep services call these functions; no other module writes
a job row (``tests/architecture`` checks it). Database-vendor branches live here too: the
claim's ``FOR UPDATE SKIP LOCKED``, settling with ``DELETE … RETURNING``, the workflow row
lock, wake-ups by ``NOTIFY``, advisory locks and query cancellation.

Ending a job is one thing, written once: its history row is inserted and its live row deleted
in the caller's transaction (:mod:`.ending`, or :mod:`.settle`, which deletes first and builds
the history rows from what the DELETE returned). Expired history rows are deleted in short
batches by :mod:`.history`.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, NullIf

from prescient import states
from prescient.clock import db_clock, db_now
from prescient.models import FutureJob, Workflow
from prescient.states import Event, State

from .. import bulk
from . import links
from .ending import end_job, end_jobs, release_waiters, resolve_waiting
from .history import prune_history
from .inserting import ONE_PENDING_JOB, can_insert_returning, insert, insert_new
from .settle import settle
from .wake import CHANNEL, can_listen, notify

logger = logging.getLogger("prescient.engine")


# --- vendor features -------------------------------------------------------------------------


def cancel_current_query() -> None:
    """Ask PostgreSQL to cancel the query this connection is waiting on, if any (a timed-out
    run): without this the server would go on executing it after the connection is dropped."""
    raw = connection.connection
    if connection.vendor != "postgresql" or raw is None:
        return
    try:
        from psycopg.pq import TransactionStatus

        if raw.info.transaction_status == TransactionStatus.ACTIVE:
            raw.cancel_safe(timeout=2.0)
    except Exception:  # best effort: the connection is dropped afterwards anyway
        logger.warning("could not cancel the query of a timed-out run", exc_info=True)


def _lock_key(name: str) -> list[int]:
    return [0x70726573, zlib.crc32(f"prescient:{name}".encode()) - 2**31]  # stable signed 32-bit keys


@contextmanager
def exclusive(name: str, *, hold_transaction: bool = True) -> Iterator[bool]:
    """A block in which this process alone holds the lock ``name``: yields whether it got it
    (PostgreSQL: an advisory lock, never waited for; elsewhere writers are serialised by the
    database, so always True).

    The block is one transaction holding a transaction-level lock; with ``hold_transaction``
    False it is no transaction (its statements commit as they go, each short) and the lock is
    held by the session until the block ends.
    """
    if hold_transaction:
        with transaction.atomic():
            yield connection.vendor != "postgresql" or _advisory("pg_try_advisory_xact_lock", name)
        return
    if connection.vendor != "postgresql":
        yield True
        return
    mine = _advisory("pg_try_advisory_lock", name)
    try:
        yield mine
    finally:
        if mine:
            try:
                _advisory("pg_advisory_unlock", name)
            except Exception:  # a broken connection: closing it releases the lock anyway
                logger.warning("could not release the advisory lock %r", name, exc_info=True)
                connection.close()


def _advisory(function: str, name: str) -> bool:
    """Call one of PostgreSQL's advisory lock functions on the lock ``name``; its answer."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", _lock_key(name))
        row = cursor.fetchone()
    return bool(row and row[0])


def save(job: FutureJob, fields: Sequence[str] | None = None) -> None:
    """Write ``fields`` (all by default) of a job the caller holds locked."""
    job.save(update_fields=None if fields is None else list(fields))


# --- workflows ---------------------------------------------------------------------------------


def lock_workflow(name: str, *, for_update: bool = False) -> bool:
    """Whether workflow ``name`` is paused, its row created if missing and locked.

    Scheduling takes a shared lock and pausing an exclusive one, so a job scheduled while its
    workflow is being paused is either seen by the pause or sees the pause.
    """
    table = connection.ops.quote_name(Workflow._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (name, paused_at) VALUES (%s, NULL) ON CONFLICT (name) DO NOTHING",
            [name],
        )
        lock = ""
        if connection.vendor == "postgresql":
            lock = " FOR UPDATE" if for_update else " FOR SHARE"
        cursor.execute(f"SELECT paused_at FROM {table} WHERE name = %s{lock}", [name])
        row = cursor.fetchone()
    return row is not None and row[0] is not None


def pause_workflow(name: str, now: datetime) -> int:
    """Mark workflow ``name`` paused and pause its jobs that may be; returns how many moved.
    Each job remembers its state in ``last_state`` (call with the workflow row locked)."""
    Workflow.objects.filter(name=name, paused_at__isnull=True).update(paused_at=now)
    movable = [s for s in states.states_from(Event.PAUSE, State.PAUSED) if s != State.PAUSED]
    return (
        FutureJob.objects.of_workflow(name)
        .filter(state__in=movable)
        .update(state=State.PAUSED, last_state=F("state"))
    )


def release_workflow(name: str) -> int:
    """Unpause workflow ``name`` and return its paused jobs to their last state; returns how
    many moved (call with the workflow row locked)."""
    Workflow.objects.filter(name=name).update(paused_at=None)
    return (
        FutureJob.objects.of_workflow(name)
        .filter(state=State.PAUSED)
        .update(
            state=Coalesce(NullIf(F("last_state"), Value("")), Value(State.SCHEDULED.value)),
            last_state="",
        )
    )


# --- claiming ----------------------------------------------------------------------------------


def due_order(now: datetime, queues: list[str] | None) -> models.QuerySet[FutureJob]:
    """Due jobs in claim order: oldest first; of ``queues`` only, by priority then age, if given."""
    if queues is None:
        return FutureJob.objects.due(now).order_by("next_check_at", "id")
    return FutureJob.objects.due(now).filter(queue__in=queues).order_by("-priority", "next_check_at", "id")


def claim(
    now: datetime, limit: int, token: str, queues: list[str] | None = None, *, start: bool = False
) -> list[FutureJob]:
    """Mark up to ``limit`` due jobs ``running`` under ``token`` and return them, oldest first.

    ``queues``: only jobs of these queues (``""`` is the queue of checks), highest priority
    first (django.tasks workers started with ``--queue``). ``start``: their runs start now too
    (their leases and ``run_started_at`` stamped; for a claim handed straight to its runners),
    so a crash charges them as runs that had started.

    On PostgreSQL this is one statement (pick with ``FOR UPDATE SKIP LOCKED``, update, return
    the rows); elsewhere a guarded update of the picked ids, then a read of what it took.
    """
    if connection.vendor == "postgresql":
        return _claim_returning(now, limit, token, queues, start=start)
    due = due_order(now, queues)
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
            state=State.RUNNING, reserved_at=clock, reserved_by=token, run_started_at=clock if start else None
        )
    if not claimed:
        return []
    return list(FutureJob.objects.filter(reserved_by=token).order_by(*due_order(now, queues).query.order_by))


def _claim_returning(
    now: datetime, limit: int, token: str, queues: list[str] | None = None, *, start: bool = False
) -> list[FutureJob]:
    # The picked ids are a MATERIALIZED CTE, evaluated exactly once (see claim()).
    pick_sql, pick_params = due_order(now, queues).values("pk")[:limit].query.sql_with_params()
    meta = FutureJob._meta
    qn = connection.ops.quote_name
    table = qn(meta.db_table)
    columns = ", ".join(f"{table}.{bulk.quote_column(f)}" for f in meta.concrete_fields)
    sql = (
        f"WITH picked (pk) AS MATERIALIZED ({pick_sql} FOR UPDATE SKIP LOCKED) "
        f"UPDATE {table} SET {qn('state')} = %s, {qn('reserved_at')} = statement_timestamp(), "
        f"{qn('reserved_by')} = %s, {qn('run_started_at')} = {'statement_timestamp()' if start else 'NULL'} "
        f"FROM picked WHERE {table}.{bulk.quote_column(meta.pk)} = picked.pk AND {table}.{qn('state')} = %s "
        f"RETURNING {columns}"
    )
    params = [*pick_params, State.RUNNING.value, token, State.SCHEDULED.value]
    jobs = list(FutureJob.objects.raw(sql, params))
    jobs.sort(key=lambda job: (job.next_check_at, job.pk))
    if queues is not None:
        jobs.sort(key=lambda job: -job.priority)  # stable: by priority, then as above
    return jobs


def start(job: FutureJob, token: str) -> bool:
    """Mark the run of a claimed job as started, its lease starting now (by the database's
    clock); False, and the run must not start, when the claim was paused, killed, cancelled or
    taken away since it was made."""
    return job.pk in start_runs([job], token)


def _startable(jobs: Sequence[FutureJob], token: str) -> models.QuerySet[FutureJob]:
    return FutureJob.objects.filter(
        pk__in=[job.pk for job in jobs], reserved_by=token, state=State.RUNNING, end_requested=""
    )


def start_runs(jobs: Sequence[FutureJob], token: str) -> set[int]:
    """Mark the runs of claimed ``jobs`` as started, their leases starting now (by the
    database's clock), in one statement; returns the ids of those that may start. The others
    were paused, killed, cancelled or taken away since they were claimed: they must not run."""
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
        f"UPDATE {table} SET {qn('run_started_at')} = {clock}, {qn('reserved_at')} = {clock} "
        f"WHERE {pk_column} IN ({marks}) AND {qn('reserved_by')} = %s AND {qn('state')} = %s "
        f"AND {qn('end_requested')} = ''"
    )
    params = [*clock_params, *clock_params, *ids, token, State.RUNNING.value]
    if not can_insert_returning():  # no RETURNING: update, then read what was started
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
            return set(_startable(jobs, token).values_list("pk", flat=True))
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {pk_column}", params)
        return {row[0] for row in cursor.fetchall()}


def still_startable(jobs: Sequence[FutureJob], token: str) -> set[int]:
    """The ids of claimed ``jobs`` whose runs may still go ahead (a read, nothing written): not
    paused, killed, cancelled or taken away since the claim that started them."""
    if not jobs:
        return set()
    return set(_startable(jobs, token).values_list("pk", flat=True))


def renew_leases(reserved_by: str, *, prefix: bool = False) -> int:
    """Stamp the claims of ``reserved_by`` (every token starting with it, with ``prefix``) as
    alive now, by the database's clock; returns how many."""
    lookup = "reserved_by__startswith" if prefix else "reserved_by"
    return FutureJob.objects.filter(**{lookup: reserved_by}).update(reserved_at=db_clock())


def clear_reservation(job: FutureJob, to: str) -> None:
    """Move a locked job whose claim is over to state ``to`` (scheduled, paused or buried)."""
    job.last_state = State.SCHEDULED if to == State.PAUSED else ""
    job.state = to
    job.reserved_by, job.reserved_at, job.run_started_at = "", None, None
    job.sleep_until = None
    job.save()


def request_end(job: FutureJob, outcome: str, reason: str) -> None:
    """Ask a locked job whose run is in flight to end with ``outcome`` once the run returns."""
    job.end_requested, job.end_reason = outcome, reason
    job.save(update_fields=["end_requested", "end_reason"])
    notify_stop()


def request_sleep(job: FutureJob, until: datetime) -> None:
    """Ask a locked job whose run is in flight to be due at ``until`` once the run returns (its
    result is then discarded)."""
    job.sleep_until = until
    job.save(update_fields=["sleep_until"])
    notify_stop()


#: The LISTEN/NOTIFY channel that tells workers a run in flight was asked to stop (PostgreSQL).
STOP_CHANNEL = "prescient_stop"


def notify_stop() -> None:
    """Tell listening workers that some run in flight was paused, killed or slept: delivered
    when the caller's transaction commits (PostgreSQL; elsewhere workers poll)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [STOP_CHANNEL])


def asked_to_stop(reserved_by: str, *, prefix: bool = False) -> list[tuple[str, int]]:
    """``(token, id)`` of the claims of ``reserved_by`` (every token starting with it, with
    ``prefix``) whose runs are asked to stop: paused, killed, cancelled or slept since the claim.
    One look at the in-flight index (only claims in flight are read)."""
    lookup = "reserved_by__startswith" if prefix else "reserved_by"
    stopped = (
        FutureJob.objects.in_flight().filter(**{lookup: reserved_by})
        .filter(~Q(state=State.RUNNING) | ~Q(end_requested="") | Q(sleep_until__isnull=False))
    )
    return list(stopped.order_by().values_list("reserved_by", "pk"))


def write_checkpoint(job: FutureJob, data: Any) -> None:
    """Keep ``data`` as the checkpoint of ``job``, in a transaction of its own, if its claim is
    still the one ``job`` holds (a run whose claim was taken away writes nothing)."""
    with transaction.atomic():
        written = FutureJob.objects.filter(pk=job.pk, reserved_by=job.reserved_by).update(checkpoint_data=data)
    if written:
        job.checkpoint_data = data
    else:
        logger.warning("job id=%s: checkpoint not kept, the run no longer holds its claim", job.pk)


FutureJob.checkpoint_writer = write_checkpoint


__all__ = [
    "CHANNEL",
    "ONE_PENDING_JOB",
    "STOP_CHANNEL",
    "asked_to_stop",
    "can_listen",
    "cancel_current_query",
    "claim",
    "clear_reservation",
    "db_now",
    "due_order",
    "end_job",
    "end_jobs",
    "exclusive",
    "insert",
    "insert_new",
    "links",
    "lock_workflow",
    "notify",
    "notify_stop",
    "pause_workflow",
    "prune_history",
    "release_waiters",
    "release_workflow",
    "renew_leases",
    "request_end",
    "request_sleep",
    "resolve_waiting",
    "save",
    "settle",
    "start",
    "start_runs",
    "still_startable",
    "write_checkpoint",
]
