"""The verbs: what host code, the admin, the API and the commands may do to jobs.

Every change goes through the transition table in :mod:`prescient.states`, with the job's row
locked (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite serialises writers), and is written by
:mod:`prescient.engine.store`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, models, transaction
from django.utils import timezone

from prescient import slots, states
from prescient.checks import Check, get_check
from prescient.conf import setting
from prescient.exceptions import InvalidEntity, InvalidTime, InvalidTransition, PrescientError
from prescient.models import FutureJob
from prescient.states import Event, Outcome, State

from . import bulk, store
from .store import notify
from .sweep import definition_of

logger = logging.getLogger(__name__)

CheckRef = str | Callable[..., Any] | Check


class JobNotFound(PrescientError, LookupError):
    """No live job with that id (it may have finished: see the history)."""

    def __init__(self, job_id: object) -> None:
        self.job_id = job_id
        super().__init__(f"No live job with id {job_id!r}; it may have finished (see JobHistory)")


# --- helpers -------------------------------------------------------------------------------


def _now(now: datetime | None) -> datetime:
    return timezone.now() if now is None else slots.require_aware(now, "now")


def _slot_minutes() -> int:
    return int(setting("SLOT_MINUTES"))


def entity_ref(entity: models.Model, check: Check) -> tuple[str, str]:
    """``(entity_name, entity_key)`` of a saved instance, checked against the check's model."""
    if not isinstance(entity, models.Model):
        raise InvalidEntity(
            f"Check {check.name!r} needs a model instance, got {type(entity).__name__}"
        )
    if entity.pk is None:
        raise InvalidEntity(f"{entity._meta.label} instance is not saved (its pk is None)")
    label = entity._meta.label_lower
    if check.model_label is not None and label != check.model_label:
        raise InvalidEntity(
            f"Check {check.name!r} is about {check.model_label}, got a {label} instance"
        )
    return label, str(entity.pk)


def due_time(
    check: Check, now: datetime, at: datetime | None = None, delay: timedelta | None = None
) -> datetime:
    """The slot a new job is first due in: ``at``, ``now + delay`` or ``now``, rounded up."""
    if at is not None and delay is not None:
        raise InvalidTime("Give either at or delay, not both")
    if at is not None:
        due = slots.require_aware(at, "at")
    elif delay is not None:
        if not isinstance(delay, timedelta):
            raise InvalidTime(f"delay must be a timedelta, got {type(delay).__name__}")
        due = now + delay
    else:
        due = now
    if due > now + check.horizon:
        raise InvalidTime(
            f"Due time {due.isoformat()} is beyond the horizon of check {check.name!r} "
            f"({check.horizon.days} days from now)"
        )
    return slots.round_up(due, _slot_minutes())


def _lock(job: FutureJob | int) -> FutureJob:
    pk = job.pk if isinstance(job, FutureJob) else job
    try:
        return FutureJob.objects.select_for_update().get(pk=pk)
    except (FutureJob.DoesNotExist, ValueError, TypeError):
        raise JobNotFound(pk) from None


def _end(job: FutureJob, event: str, outcome: str, reason: str, now: datetime) -> str:
    """End a locked job now, or, if its run is in flight, once the run returns."""
    states.target(job, event)
    if job.in_flight:
        store.request_end(job, outcome, reason)
        logger.info("job id=%s %s requested while its run is in flight", job.pk, outcome)
        return "requested"
    job.end_reason = reason
    store.end_job(job, outcome, now)
    return "ended"


# --- scheduling ------------------------------------------------------------------------------


def schedule_job(
    entity: models.Model,
    check: CheckRef,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    workflow: str = "",
    replace: bool = False,
    now: datetime | None = None,
) -> tuple[FutureJob, bool]:
    """Like :func:`schedule`, also saying whether the job was created (True) or existed."""
    entry = get_check(check)
    entity_name, entity_key = entity_ref(entity, entry)
    now = _now(now)
    first = due_time(entry, now, at, delay)
    workflow = workflow or ""
    key = {"entity_name": entity_name, "entity_key": entity_key, "job_exec": entry.name}
    if not workflow and not replace:
        # The common case in one statement (so, in autocommit mode, one round trip).
        job = _new_job(key, "", False, first, now)
        written = store.insert_new([job], returning=True)
        if written:
            logger.debug("job id=%s scheduled %s at %s", job.pk, entry.name, first.isoformat())
            if first <= now:
                notify()  # due already: wake a worker rather than wait for the next slot
            return job, True
        existing = None if written is None else FutureJob.objects.filter(**key).first()
        if existing is not None:
            return existing, False
        # It ended between the two statements (or this database needs two): schedule it below.
    with transaction.atomic():
        existing = FutureJob.objects.select_for_update().filter(**key).first()
        if existing is None:
            paused = bool(workflow) and store.lock_workflow(workflow)
            job = _new_job(key, workflow, paused, first, now)
            try:
                with transaction.atomic():
                    store.insert(job)
            except IntegrityError:
                existing = FutureJob.objects.select_for_update().filter(**key).first()
                if existing is None:  # the clash was not the one-pending-job rule
                    raise
            else:
                logger.debug("job id=%s scheduled %s at %s", job.pk, entry.name, first.isoformat())
                if first <= now and not paused:
                    notify()  # due already: wake a worker rather than wait for the next slot
                return job, True
        if replace and existing.next_check_at != first:
            _set_due(existing, Event.SLEEP, first)
        return existing, False


def _new_job(key: dict[str, str], workflow: str, paused: bool, first: datetime, now: datetime) -> FutureJob:
    return FutureJob(
        **key,
        workflow=workflow,
        state=State.PAUSED if paused else State.SCHEDULED,
        last_state=State.SCHEDULED if paused else "",
        first_check_at=first,
        next_check_at=first,
        created_at=now,
    )


def schedule(
    entity: models.Model,
    check: CheckRef,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    workflow: str = "",
    replace: bool = False,
    now: datetime | None = None,
) -> FutureJob:
    """Schedule ``check`` for ``entity``: due at ``at`` or after ``delay`` (else now), rounded
    up to a slot.

    One job is pending per (entity, check): if one exists it is returned unchanged, unless
    ``replace=True`` moves its due time. A job scheduled into a paused workflow starts paused.
    Raises UnknownCheck, InvalidEntity or InvalidTime, writing nothing.
    """
    return schedule_job(
        entity, check, at=at, delay=delay, workflow=workflow, replace=replace, now=now
    )[0]


def schedule_many(
    entities: models.QuerySet[Any] | Iterable[models.Model],
    check: CheckRef,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    workflow: str = "",
    now: datetime | None = None,
    batch_size: int = 1000,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Schedule ``check`` for many entities at once; returns how many jobs were created.

    ``entities`` is a QuerySet of the check's model (only its primary keys are read, in
    batches) or an iterable of saved instances. Every job is due at the same time, worked out
    as :func:`schedule` does (``at`` or ``delay``, rounded up to a slot). An entity that
    already has a pending job of this check keeps it unchanged and is not counted. Jobs
    scheduled into a paused workflow start paused. Raises UnknownCheck, InvalidEntity or
    InvalidTime before writing anything.

    Each batch of ``batch_size`` entities is one ``INSERT … ON CONFLICT DO NOTHING`` in a
    transaction of its own, unless the call is made inside a transaction (wrap it in
    ``transaction.atomic()`` for all or nothing). ``progress(entities seen, jobs created)`` is
    called after each batch.
    """
    entry = get_check(check)
    now = _now(now)
    first = due_time(entry, now, at, delay)
    workflow = workflow or ""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    keys: Iterable[tuple[str, str]]
    if isinstance(entities, models.QuerySet):
        label = entities.model._meta.label_lower
        if entry.model_label is not None and label != entry.model_label:
            raise InvalidEntity(f"Check {entry.name!r} is about {entry.model_label}, got a {label} queryset")
        keys = ((label, str(pk)) for pk in _pks_of(entities, batch_size))
    else:
        keys = [entity_ref(entity, entry) for entity in entities]  # all checked before any write
    size = bulk.max_rows(bulk.insert_fields(FutureJob), batch_size)
    seen = created = 0
    for batch in bulk.chunks(keys, size):
        unique = dict.fromkeys(batch)  # the same entity twice makes one job
        with transaction.atomic():
            paused = bool(workflow) and store.lock_workflow(workflow)
            jobs = [
                _new_job({"entity_name": name, "entity_key": key, "job_exec": entry.name}, workflow, paused, first, now)
                for name, key in unique
            ]
            written = store.insert_new(jobs, returning=False) or 0
            if written and first <= now and not paused:
                notify()
        seen += len(batch)
        created += written
        if progress is not None:
            progress(seen, created)
    logger.info("scheduled %s job(s) of %s for %s entities", created, entry.name, seen)
    return created


def _pks_of(queryset: models.QuerySet[Any], batch_size: int) -> Iterator[Any]:
    """The primary keys of ``queryset``, read a batch at a time in key order (no cursor is
    held open between batches, so writing between them is safe on every database)."""
    if queryset.query.is_sliced:
        yield from list(queryset.values_list("pk", flat=True))
        return
    rows = queryset.order_by("pk").values_list("pk", flat=True)
    last = None
    while True:
        batch = list((rows if last is None else rows.filter(pk__gt=last))[:batch_size])
        yield from batch
        if len(batch) < batch_size:
            return
        last = batch[-1]


def cancel(entity: models.Model, check: CheckRef, *, now: datetime | None = None) -> bool:
    """End the pending job of ``check`` for ``entity`` with outcome ``cancelled``.

    Returns True if there was one. A job whose run is in flight ends when the run returns.
    """
    entry = get_check(check)
    entity_name, entity_key = entity_ref(entity, entry)
    now = _now(now)
    with transaction.atomic():
        job = (
            FutureJob.objects.select_for_update()
            .filter(entity_name=entity_name, entity_key=entity_key, job_exec=entry.name)
            .first()
        )
        if job is None:
            return False
        _end(job, Event.CANCEL, Outcome.CANCELLED, "cancelled", now)
        return True


# --- commands on one job ---------------------------------------------------------------------


def _set_due(job: FutureJob, event: str, when: datetime) -> FutureJob:
    to = states.target(job, event)
    if job.in_flight:  # a run in flight settles the job itself: sleep() defers, others refuse
        raise InvalidTransition(job, event, "its run is in flight")
    job.state = to
    job.next_check_at = when
    if to != State.PAUSED:
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
        return _end(_lock(job), Event.KILL, Outcome.KILLED, reason.strip(), now)


# --- pause and release -----------------------------------------------------------------------


def _pause_job(job: FutureJob | int) -> int:
    locked = _lock(job)
    to = states.target(locked, Event.PAUSE)
    if locked.state == to:
        return 0
    locked.last_state, locked.state = locked.state, to
    store.save(locked, ["state", "last_state"])
    if locked.in_flight:
        store.notify_stop()  # its run is asked to stop (see job.should_stop())
    return 1


def _release_job(job: FutureJob | int) -> int:
    locked = _lock(job)
    to = states.target(locked, Event.RELEASE)
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
    *, workflow: str | None = None, job: FutureJob | int | None = None, now: datetime | None = None
) -> int:
    """Pause a workflow (and every job in it) or one job; returns how many jobs became paused.

    Scheduled jobs stop being claimed; running ones go on and are marked paused. Each job
    remembers its last state for :func:`release`. Idempotent. Pausing one job whose state does
    not allow it (buried) raises InvalidTransition; a workflow's buried jobs are left alone.
    """
    now = _now(now)
    _one_of(workflow, job)
    with transaction.atomic():
        if workflow is None:
            count = _pause_job(job)  # type: ignore[arg-type]
        else:
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
    paused while their run was in flight go back to running and are not started again.
    """
    _now(now)
    _one_of(workflow, job)
    with transaction.atomic():
        if workflow is None:
            count = _release_job(job)  # type: ignore[arg-type]
        else:
            store.lock_workflow(workflow, for_update=True)
            count = store.release_workflow(workflow)
        if count:
            notify()  # released jobs may be overdue
    logger.info("released %s job(s) of %s", count, workflow if workflow is not None else f"job {job}")
    return count
