"""The verbs: what host code, the admin, the API and the commands may do to jobs.

Every change goes through the transition table in :mod:`prescient.states`, with the job's row
locked (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite serialises writers), and is written by
:mod:`prescient.engine.store`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, models, transaction

from prescient import limits
from prescient.checks import Check, get_check, schedulable
from prescient.exceptions import ImmutableField, InvalidEntity
from prescient.exceptions import JobNotFound as JobNotFound  # re-exported: it used to live here
from prescient.models import FutureJob
from prescient.states import Event, Outcome
from prescient.wording import entity_text

from . import bulk, dependencies, store
from .commands import cancel_job, kill, pause, release, run_now, sleep  # re-exported: the verbs are one API
from .dependencies import ParentRef
from .rerun import rerun  # re-exported: the verbs are one API
from .store import notify
from .targets import _now, due_time, entity_ref

logger = logging.getLogger(__name__)

CheckRef = str | Callable[..., Any] | Check


# --- scheduling ------------------------------------------------------------------------------


def schedule_job(
    entity: models.Model,
    check: CheckRef,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    workflow: str = "",
    replace: bool = False,
    after: Iterable[ParentRef] | None = None,
    on_parent_failure: str = "cancel",
    now: datetime | None = None,
) -> tuple[FutureJob, bool]:
    """Like :func:`schedule`, also saying whether the job was created (True) or existed."""
    entry = schedulable(check)
    entity_name, entity_key = entity_ref(entity, entry)
    now = _now(now)
    first = entry.spread_at(due_time(entry, now, at, delay), entity_name, entity_key)
    workflow = workflow or ""
    held = _limit_keys(entry, entity, entity_name, entity_key)
    parents, policy = dependencies.parent_ids(after), dependencies.policy(on_parent_failure)
    key = {"entity_name": entity_name, "entity_key": entity_key, "job_exec": entry.name}
    if not workflow and not replace and not parents:
        # The common case in one statement (so, in autocommit mode, one round trip).
        # A job due already wakes a worker (in the same statement) rather than wait for the next slot.
        job = store.new_job(
            entity_name=entity_name, entity_key=entity_key, job_exec=entry.name, due=first, now=now, queue=entry.queue,
            limit_key=held[0], rate_key=held[1],
        )
        written = store.insert_new([job], returning=True, wake=first <= now)
        if written:
            logger.debug("job id=%s scheduled %s at %s", job.pk, entry.name, first)
            return job, True
        existing = None if written is None else FutureJob.objects.filter(**key).first()
        if existing is not None:
            return existing, False
        # It ended between the two statements (or this database needs two): schedule it below.
    with transaction.atomic():
        existing = FutureJob.objects.select_for_update().filter(**key).first()
        if existing is None:
            paused = bool(workflow) and store.lock_workflow(workflow)
            dependencies.lock_parents(parents)
            job = store.new_job(
                entity_name=entity_name, entity_key=entity_key, job_exec=entry.name, due=first, now=now,
                workflow=workflow, paused=paused, waiting=bool(parents), queue=entry.queue,
                limit_key=held[0], rate_key=held[1],
            )
            try:
                with transaction.atomic():
                    store.insert(job)
            except IntegrityError:
                existing = FutureJob.objects.select_for_update().filter(**key).first()
                if existing is None:  # the clash was not the one-pending-job rule
                    raise
            else:
                logger.debug("job id=%s scheduled %s at %s", job.pk, entry.name, first.isoformat())
                if parents:
                    dependencies.attach([job.pk], parents, policy, now)
                    return dependencies.current(job), True
                if first <= now and not paused:
                    notify()  # due already: wake a worker rather than wait for the next slot
                return job, True
        if replace and workflow and existing.workflow != workflow:
            raise ImmutableField(
                "workflow", existing.pk,
                f"Job {existing.pk} ({entry.name} {entity_text(entity_name, entity_key)}) is in workflow "
                f"{existing.workflow!r}, "
                f"not {workflow!r}: replace=True moves a pending job's due time, never its workflow. Cancel it "
                "and schedule it again to put it in another workflow.",
            )
        if replace and existing.next_check_at != first:
            store.move(existing, Event.SLEEP, due=first, refuse_in_flight=True)
        return existing, False


def schedule(
    entity: models.Model,
    check: CheckRef,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    workflow: str = "",
    replace: bool = False,
    after: Iterable[ParentRef] | None = None,
    on_parent_failure: str = "cancel",
    now: datetime | None = None,
) -> FutureJob:
    """Schedule ``check`` for ``entity``: due at ``at`` or after ``delay`` (else now), rounded
    up to a slot.

    One job is pending per (entity, check): if one exists it is returned unchanged, unless
    ``replace=True`` moves its due time. A job scheduled into a paused workflow starts paused.
    A job stays in the workflow it was scheduled into: ``replace=True`` naming another
    ``workflow`` raises ImmutableField, writing nothing (without ``replace`` the pending job is
    returned as it is, whatever ``workflow`` says).

    ``after``: jobs (live, or their ids, or ids of jobs in the history) this one runs after. It
    is ``waiting`` until all of them have ended, then due at its own time. When one ends other
    than ``completed``, ``on_parent_failure="cancel"`` ends it ``cancelled``; ``"run"`` runs it
    anyway. Raises UnknownCheck, InvalidEntity, InvalidTime, InvalidDependency or
    UnknownParent, writing nothing.
    """
    return schedule_job(
        entity, check, at=at, delay=delay, workflow=workflow, replace=replace, after=after,
        on_parent_failure=on_parent_failure, now=now,
    )[0]


def schedule_many(
    entities: models.QuerySet[Any] | Iterable[models.Model],
    check: CheckRef,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    workflow: str = "",
    after: Iterable[ParentRef] | None = None,
    on_parent_failure: str = "cancel",
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
    called after each batch. ``after`` and ``on_parent_failure``: as for :func:`schedule`, for
    every job created.
    """
    entry = schedulable(check)
    now = _now(now)
    first = due_time(entry, now, at, delay)
    workflow = workflow or ""
    parents, policy = dependencies.parent_ids(after), dependencies.policy(on_parent_failure)
    if parents:
        with transaction.atomic():
            dependencies.lock_parents(parents)  # UnknownParent before any write
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    keys: Iterable[tuple[str, str]]
    if isinstance(entities, models.QuerySet):
        label = entities.model._meta.label_lower
        if entry.model_label is not None and label != entry.model_label:
            raise InvalidEntity(f"Check {entry.name!r} is about {entry.model_label}, got a queryset of {label}")
        keys = ((label, str(pk)) for pk in _pks_of(entities, batch_size))
    else:
        keys = [entity_ref(entity, entry) for entity in entities]  # all checked before any write
    size = bulk.max_rows(bulk.insert_fields(FutureJob), batch_size)
    seen = created = 0
    for batch in bulk.chunks(keys, size):
        unique = dict.fromkeys(batch)  # the same entity twice makes one job
        # Without a workflow or parents, a batch is one statement (its own transaction unless
        # the caller's), the wake-up in it; else the workflow or parents are locked first.
        with transaction.atomic() if workflow or parents else contextlib.nullcontext():
            paused = bool(workflow) and store.lock_workflow(workflow)
            held = _many_limit_keys(entry, list(unique))
            if parents:
                jobs = [
                    store.new_job(entity_name=name, entity_key=key, job_exec=entry.name,
                                  due=entry.spread_at(first, name, key), now=now, workflow=workflow, paused=paused,
                                  waiting=True, queue=entry.queue, limit_key=limit_key, rate_key=rate_key)
                    for name, key in unique
                    for limit_key, rate_key in [held.get((name, key), ("", ""))]
                ]
                dependencies.lock_parents(parents)
                pks = store.links.insert_waiting(jobs)
                dependencies.attach(pks, parents, policy, now)
                written = len(pks)
            elif held or entry.spread is not None:  # a key or a due time of its own per entity: a job each
                jobs = [
                    store.new_job(entity_name=name, entity_key=key, job_exec=entry.name,
                                  due=entry.spread_at(first, name, key), now=now, workflow=workflow, paused=paused,
                                  queue=entry.queue, limit_key=limit_key, rate_key=rate_key)
                    for name, key in unique
                    for limit_key, rate_key in [held.get((name, key), ("", ""))]
                ]
                written = store.insert_new(jobs, returning=False, wake=first <= now and not paused) or 0
            else:  # one job, copied for each entity
                job = store.new_job(entity_name="", entity_key="", job_exec=entry.name, due=first, now=now,
                                    workflow=workflow, paused=paused, queue=entry.queue)
                written = store.insert_copies(job, list(unique), wake=first <= now and not paused)
        seen += len(batch)
        created += written
        if progress is not None:
            progress(seen, created)
    logger.info("scheduled %s job(s) of %s for %s entities", created, entry.name, seen)
    return created


def _limit_keys(entry: Check, entity: models.Model | None, entity_name: str, entity_key: str) -> tuple[str, str]:
    """The job's keys under its check's limit and rate (``""``: none)."""
    if entry.limit is None and entry.rate is None:
        return "", ""
    return (
        limits.key_of(entry.limit, entry.name, entity, entity_name, entity_key),
        limits.key_of(entry.rate, entry.name, entity, entity_name, entity_key),
    )


def _many_limit_keys(entry: Check, keys: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """Likewise for many entities (one query per field path and model); {} when the check has
    no limit nor rate."""
    if entry.limit is None and entry.rate is None:
        return {}
    by_model: dict[str, list[str]] = {}
    for name, key in keys:
        by_model.setdefault(name, []).append(key)
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for name, entity_keys in by_model.items():
        limit_keys = limits.keys_of_many(entry.limit, entry.name, name, entity_keys)
        rate_keys = limits.keys_of_many(entry.rate, entry.name, name, entity_keys)
        for key in entity_keys:
            found[(name, key)] = (limit_keys[key], rate_keys[key])
    return found


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
        store.end(job, Event.CANCEL, Outcome.CANCELLED, "cancelled", now)
        return True


__all__ = [
    "CheckRef", "JobNotFound", "cancel", "cancel_job",
    "due_time", "entity_ref", "kill", "pause", "release", "rerun", "run_now", "schedule",
    "schedule_job", "schedule_many", "sleep",
]
