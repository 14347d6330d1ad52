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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, NullIf

from prescient import states
from prescient.clock import db_now
from prescient.models import FutureJob, Workflow
from prescient.states import Event, State

from . import links
from .claims import claim, renew_leases, start_runs
from .ending import release_waiters, resolve_waiting
from .history import prune_history
from .inserting import ONE_PENDING_JOB, insert, insert_copies, insert_new
from .jobs import new_job
from .moves import STOP_CHANNEL, end, move, note_in_run, notify_stop, preview
from .settle import settle
from .tallies import count_rescues
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
def exclusive(name: str, *, hold_transaction: bool = True, wait: bool = False) -> Iterator[bool]:
    """A block in which this process alone holds the lock ``name``: yields whether it got it
    (PostgreSQL: an advisory lock, not waited for unless ``wait``; elsewhere writers are
    serialised by the database, so always True).

    The block is one transaction holding a transaction-level lock (``wait``: it waits for
    whoever holds the lock, in that transaction), released by the commit or the rollback on the
    server connection that took it, pooled or not. With ``hold_transaction`` False it is no
    transaction (its statements commit as they go) and the lock is the session's until the
    block ends: only for work that cannot run in a transaction (``VACUUM``). Through a pooler in
    transaction mode its unlock may run on another server connection; that unlock's answer is
    checked, and when it was not this session's lock the connection is closed (see
    :func:`_unlock`). Work that can be cut into transactions takes the lock in each of them.
    """
    if hold_transaction:
        with transaction.atomic():
            if connection.vendor != "postgresql":
                yield True
            elif wait:
                _advisory("pg_advisory_xact_lock", name)
                yield True
            else:
                yield _advisory("pg_try_advisory_xact_lock", name)
        return
    if connection.vendor != "postgresql":
        yield True
        return
    if wait:
        _advisory("pg_advisory_lock", name)
        mine = True
    else:
        mine = _advisory("pg_try_advisory_lock", name)
    try:
        yield mine
    finally:
        if mine:
            _unlock(name)


def _unlock(name: str) -> None:
    """Release the session lock ``name``, and check that it was released.

    PostgreSQL answers False when this server session did not hold the lock: the unlock ran on
    another server connection than the lock (a pooler in transaction mode lends one per
    transaction), and the lock stays with the first one, every process skipping the duty, until
    that server connection closes. The warning says so, and the connection is closed: with no
    pooler, or a pool in session mode (which resets a server connection when its client leaves:
    PgBouncer's ``server_reset_query``, ``DISCARD ALL``), that ends the session and its locks.
    A transaction-mode pool resets nothing by default: the lock lasts until the pooler closes
    that server connection (``server_lifetime``), or a reset it runs after every transaction
    (``server_reset_query_always``) releases it.
    """
    try:
        released = _advisory("pg_advisory_unlock", name)
    except Exception:  # a broken connection: closing it releases the lock anyway
        logger.warning("could not release the advisory lock %r", name, exc_info=True)
        connection.close()
        return
    if not released:
        logger.warning(
            "the advisory lock %r was not held by this session when released: the unlock ran on another "
            "server connection than the lock, as behind a connection pooler in transaction mode (PgBouncer); "
            "closing this connection (a session-mode pool, or the server, then releases it; a transaction-mode pool "
            "keeps it until it closes that server connection). Connect this process directly or through a "
            "session-mode pool (docs/operations.md, PgBouncer)", name,
        )
        connection.close()


def _advisory(function: str, name: str) -> bool:
    """Call one of PostgreSQL's advisory lock functions on the lock ``name``; its answer."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", _lock_key(name))
        row = cursor.fetchone()
    return bool(row and row[0])


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
    movable = [s for s in states.states_from(Event.PAUSE, State.PAUSED) if s not in (State.PAUSED, State.RESERVED)]
    jobs = FutureJob.objects.of_workflow(name)
    # A reserved job is taken back from its claim at once (see claims.take_back).
    taken = jobs.filter(state=State.RESERVED).update(
        state=State.PAUSED, last_state=State.SCHEDULED, reserved_by="", reserved_at=None, run_started_at=None
    )
    return taken + jobs.filter(state__in=movable).update(state=State.PAUSED, last_state=F("state"))


def release_workflow(name: str) -> int:
    """Unpause workflow ``name`` and return its paused jobs to their last state (and drop the
    pause its waiting jobs keep for when they are unblocked); returns how many moved (call with
    the workflow row locked)."""
    Workflow.objects.filter(name=name).update(paused_at=None)
    jobs = FutureJob.objects.of_workflow(name)
    held = jobs.filter(state=State.WAITING, last_state=State.PAUSED).update(last_state="")
    return held + jobs.filter(state=State.PAUSED).update(
        state=Coalesce(NullIf(F("last_state"), Value("")), Value(State.SCHEDULED.value)),
        last_state="",
    )


def asked_to_stop(reserved_by: str, *, prefix: bool = False) -> list[tuple[str, int]]:
    """``(token, id)`` of the claims of ``reserved_by`` (every token starting with it, with
    ``prefix``) whose runs are asked to stop: paused, killed, cancelled or slept since the claim.
    One look at the in-flight index (only claims in flight are read)."""
    lookup = "reserved_by__startswith" if prefix else "reserved_by"
    stopped = (
        FutureJob.objects.in_flight().filter(**{lookup: reserved_by})
        .filter(Q(state=State.PAUSED) | ~Q(end_requested="") | Q(sleep_until__isnull=False))
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
    "count_rescues",
    "db_now",
    "end",
    "exclusive",
    "insert",
    "insert_copies",
    "insert_new",
    "links",
    "lock_workflow",
    "move",
    "new_job",
    "note_in_run",
    "notify",
    "notify_stop",
    "pause_workflow",
    "preview",
    "prune_history",
    "release_waiters",
    "release_workflow",
    "renew_leases",
    "resolve_waiting",
    "settle",
    "start_runs",
    "write_checkpoint",
]
