"""The verbs that steer one job or a workflow: ``run_now``, ``sleep``, ``kill``, ``pause`` and
``release``. Each goes through the transition table with the job's row (or the workflow's)
locked, and is written by :mod:`prescient.engine.store`; a run in flight is told to stop."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction

from prescient import slots
from prescient.exceptions import InvalidTime
from prescient.models import FutureJob
from prescient.states import Event, Outcome, State

from . import store, workflows
from .store import notify
from .sweep import definition_of
from .targets import _lock, _now, _slot_minutes

logger = logging.getLogger("prescient.engine.verbs")


# --- commands on one job ---------------------------------------------------------------------


def run_now(job: FutureJob | int, *, now: datetime | None = None) -> FutureJob:
    """Make a job due at once, without waiting for a slot: a scheduled or buried one, or a
    paused one, which is released (Metafora's Run). A job paused while its run was in flight
    goes back to running (the run is not started twice)."""
    now = _now(now)
    with transaction.atomic():
        locked = _lock(job)
        store.move(locked, Event.RUN_NOW, due=now)  # paused with its run in flight: released into it
        if locked.state != State.RUNNING:
            notify()
        return locked


def sleep(job: FutureJob | int, at: datetime, *, now: datetime | None = None) -> FutureJob:
    """Move a job's next check to ``at`` (rounded up to a slot, within a day before ``now`` and
    the check's horizon after it); a paused job stays paused.

    A job whose run is in flight is asked to stop (see ``job.should_stop()``); when the run
    returns its result is discarded (an error it raised is kept) and the job is due at ``at``.
    """
    now = _now(now)
    slots.require_aware(at, "at")
    if at < now - timedelta(days=1):
        raise InvalidTime(f"{at.isoformat()} is more than a day before now")
    with transaction.atomic():
        locked = _lock(job)
        entry = definition_of(locked)
        if entry is not None and at > now + entry.horizon:
            raise InvalidTime(f"{at.isoformat()} is beyond the horizon of check {entry.name!r}")
        store.move(locked, Event.SLEEP, due=slots.round_up(at, _slot_minutes()))
        return locked


def kill(job: FutureJob | int, reason: str, *, now: datetime | None = None) -> str:
    """End a job with outcome ``killed`` and ``reason``.

    Returns ``"ended"``, or ``"requested"`` when its run is in flight: the run returns, its
    result is discarded and the job ends ``killed``.
    """
    if not reason or not reason.strip():
        raise ValueError("A kill needs a reason")
    now = _now(now)
    with transaction.atomic():
        store.links.lock_workflows_of_children([job.pk if isinstance(job, FutureJob) else job])  # before the job
        return store.end(_lock(job), Event.KILL, Outcome.KILLED, reason.strip(), now)


# --- pause and release -----------------------------------------------------------------------


def _pause_job(job: FutureJob | int) -> int:
    return int(store.move(_lock(job), Event.PAUSE))


def _release_job(job: FutureJob | int) -> int:
    return int(store.move(_lock(job), Event.RELEASE))


def _one_of(workflow: str | None, job: FutureJob | int | None) -> None:
    if (workflow is None) == (job is None):
        raise ValueError("Give exactly one of workflow= or job=")
    if workflow is not None and not workflow:
        # "" means "no workflow": jobs without one are never paused as a group.
        raise ValueError("A workflow name must not be empty")


def pause(
    *,
    workflow: str | None = None,
    job: FutureJob | int | None = None,
    create_workflow: bool = False,
    now: datetime | None = None,
) -> int:
    """Pause a workflow (and every job in it) or one job; returns how many jobs became paused.

    Scheduled jobs stop being claimed; reserved ones (claimed, their code not started) are
    taken back from their claims; running ones go on and are marked paused. Each job
    remembers its last state for :func:`release`. Idempotent. Pausing one job whose state does
    not allow it (buried) raises InvalidTransition; a workflow's buried jobs are left alone.
    A ``waiting`` job paused by itself stays waiting, and the pause is kept (``last_state``
    ``paused``): once its parents have all ended it becomes ``paused``, not ``scheduled``. A
    paused workflow leaves its waiting jobs as they are (they are unblocked paused while it is).

    A workflow no job or schedule uses raises UnknownWorkflow (naming the closest known ones)
    unless ``create_workflow=True``: then it is made, paused, and jobs scheduled into it later
    start paused.
    """
    now = _now(now)
    _one_of(workflow, job)
    with transaction.atomic():
        if workflow is None:
            count = _pause_job(job)  # type: ignore[arg-type]
        else:
            if not create_workflow:
                workflows.require(workflow)
            store.lock_workflow(workflow, for_update=True)
            count = store.pause_workflow(workflow, now)
            if count:
                store.notify_stop()  # runs in flight among them are asked to stop
    logger.info("paused %s job(s) of %s", count, workflow if workflow is not None else f"job {job}")
    return count


def release(
    *, workflow: str | None = None, job: FutureJob | int | None = None, now: datetime | None = None
) -> int:
    """Return paused jobs to their last state; returns how many were released. Idempotent.

    Jobs paused while scheduled become scheduled (overdue ones run at the next tick); jobs
    paused while their run was in flight go back to running and are not started again; a
    waiting job's kept pause is dropped (it is unblocked ``scheduled``). A workflow no job or
    schedule uses raises UnknownWorkflow (naming the closest known ones).
    """
    _now(now)
    _one_of(workflow, job)
    with transaction.atomic():
        if workflow is None:
            count = _release_job(job)  # type: ignore[arg-type]
        else:
            workflows.require(workflow)
            store.lock_workflow(workflow, for_update=True)
            count = store.release_workflow(workflow)
        if count:
            notify()  # released jobs may be overdue
    logger.info("released %s job(s) of %s", count, workflow if workflow is not None else f"job {job}")
    return count


# --- cancel one job --------------------------------------------------------------------------


def cancel_job(job: FutureJob | int, *, now: datetime | None = None) -> str:
    """End one job with outcome ``cancelled``, as :func:`~prescient.engine.verbs.cancel` does
    for an entity's check. Returns ``"ended"``, or ``"requested"`` when its run is in flight
    (the job ends cancelled when the run returns)."""
    now = _now(now)
    with transaction.atomic():
        store.links.lock_workflows_of_children([job.pk if isinstance(job, FutureJob) else job])  # before the job
        return store.end(_lock(job), Event.CANCEL, Outcome.CANCELLED, "cancelled", now)
