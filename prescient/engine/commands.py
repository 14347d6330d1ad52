"""The verbs that steer one job or a workflow: ``run_now``, ``sleep``, ``kill``, ``pause`` and
``release``. Each goes through the transition table with the job's row (or the workflow's)
locked, and is written by :mod:`prescient.engine.store`; a run in flight is told to stop."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction

from prescient import slots, states
from prescient.exceptions import InvalidTime, InvalidTransition
from prescient.models import FutureJob
from prescient.states import Event, Outcome, State

from . import store, workflows
from .store import notify
from .sweep import definition_of
from .targets import _end, _lock, _now, _slot_minutes

logger = logging.getLogger("prescient.engine.verbs")


# --- commands on one job ---------------------------------------------------------------------


def _set_due(job: FutureJob, event: str, when: datetime) -> FutureJob:
    to = states.target(job, event)
    if job.in_flight:  # a run in flight settles the job itself: sleep() defers, others refuse
        raise InvalidTransition(job, event, "its run is in flight")
    job.state = to
    job.next_check_at = when
    if to not in (State.PAUSED, State.WAITING):  # a waiting job keeps a pause for its unblocking
        job.last_state = ""
    store.save(job, ["state", "next_check_at", "last_state"])
    return job


def run_now(job: FutureJob | int, *, now: datetime | None = None) -> FutureJob:
    """Make a job due at once, without waiting for a slot: a scheduled or buried one, or a
    paused one, which is released (Metafora's Run). A job paused while its run was in flight
    goes back to running (the run is not started twice)."""
    now = _now(now)
    with transaction.atomic():
        locked = _lock(job)
        to = states.target(locked, Event.RUN_NOW)
        if to == State.RUNNING:  # paused with its run in flight: released, as release() does
            locked.state, locked.last_state = to, ""
            store.save(locked, ["state", "last_state"])
            return locked
        locked = _set_due(locked, Event.RUN_NOW, now)
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
        when = slots.round_up(at, _slot_minutes())
        if locked.state == State.RESERVED:  # taken back from its claim: its code never runs
            locked.next_check_at = when
            store.take_back(locked, states.target(locked, Event.SLEEP))
            return locked
        if locked.in_flight:
            states.target(locked, Event.SLEEP)
            store.request_sleep(locked, when)
            logger.info("job id=%s sleep until %s requested while its run is in flight", locked.pk, when.isoformat())
            return locked
        return _set_due(locked, Event.SLEEP, when)


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
        return _end(_lock(job), Event.KILL, Outcome.KILLED, reason.strip(), now)


# --- pause and release -----------------------------------------------------------------------


def _pause_job(job: FutureJob | int) -> int:
    locked = _lock(job)
    to = states.target(locked, Event.PAUSE)
    if locked.state == State.WAITING:
        # It stays waiting; the pause is kept (last_state) and applies when it is unblocked.
        if locked.last_state == State.PAUSED:
            return 0
        locked.last_state = State.PAUSED
        store.save(locked, ["last_state"])
        return 1
    if locked.state == to:
        return 0
    if locked.state == State.RESERVED:  # taken back from its claim: its code never runs
        store.take_back(locked, to)
        return 1
    locked.last_state, locked.state = locked.state, to
    store.save(locked, ["state", "last_state"])
    if locked.in_flight:
        store.notify_stop()  # its run is asked to stop (see job.should_stop())
    return 1


def _release_job(job: FutureJob | int) -> int:
    locked = _lock(job)
    to = states.target(locked, Event.RELEASE)
    if locked.state == State.WAITING and locked.last_state == State.PAUSED:  # a pause kept for its unblocking
        locked.last_state = ""
        store.save(locked, ["last_state"])
        return 1
    if locked.state == to:
        return 0
    locked.state, locked.last_state = to, ""
    store.save(locked, ["state", "last_state"])
    return 1


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
        return _end(_lock(job), Event.CANCEL, Outcome.CANCELLED, "cancelled", now)
