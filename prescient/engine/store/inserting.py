"""Inserting new jobs: one statement each time, the wake-up of listening workers in it."""

from __future__ import annotations

import contextlib
import functools
from typing import cast

from django.db import connection, models, transaction

from prescient.models import FutureJob

from .. import bulk
from .wake import CHANNEL, can_listen, notify

#: The unique constraint that keeps one pending job per entity and check.
ONE_PENDING_JOB = "prescient_one_pending_job"


def can_insert_returning() -> bool:
    """Whether ``INSERT … ON CONFLICT (…) DO NOTHING RETURNING`` works (PostgreSQL, SQLite 3.35+)."""
    features = connection.features
    return bool(features.can_return_columns_from_insert and features.supports_update_conflicts_with_target)


@functools.cache
def _one_pending_job_columns() -> tuple[str, ...]:
    unique = next(c for c in FutureJob._meta.constraints if getattr(c, "name", "") == ONE_PENDING_JOB)
    assert isinstance(unique, models.UniqueConstraint)
    fields = [cast("bulk.Field", FutureJob._meta.get_field(name)) for name in unique.fields]
    return tuple(cast(str, f.column) for f in fields)  # concrete fields: each has a column


def insert_new(jobs: list[FutureJob], *, returning: bool, wake: bool = False) -> int | None:
    """Insert ``jobs`` in one statement, skipping any that already has a pending job; returns
    how many were written. With ``returning`` (a single job), also sets its pk, or returns None
    when this database cannot (the caller then saves it in a transaction).

    With ``wake``, listening workers are told when a job was written, in the same statement
    (PostgreSQL: delivered when it commits; nothing is sent when every job was skipped). The
    statement is its own transaction in autocommit mode: no ``BEGIN``, no read-back.
    """
    if not can_insert_returning():
        if returning:
            return None
        # Without RETURNING (older SQLite) the rows written are counted instead.
        with transaction.atomic():
            fields = bulk.insert_fields(FutureJob)
            before = FutureJob.objects.count()
            bulk.insert_rows(FutureJob, bulk.prep_all(jobs, fields, add=True), fields,
                             skip_conflicts_on=_one_pending_job_columns())
            written = FutureJob.objects.count() - before
            if written and wake:
                notify()
        return written
    fields = bulk.insert_fields(FutureJob)
    pks = bulk.insert_rows(
        FutureJob, bulk.prep_all(jobs, fields, add=True), fields, skip_conflicts_on=_one_pending_job_columns(),
        returning=_pk_column(), notify=CHANNEL if wake and can_listen() else None,
    )
    if returning and pks:
        job = jobs[0]
        job.pk = pks[0]
        job._state.adding = False
        job._state.db = connection.alias
    return len(pks)


@functools.cache
def _pk_column() -> str:
    pk = FutureJob._meta.pk
    assert pk is not None
    return cast(str, pk.column)


def insert(job: FutureJob, *, wake: bool = False, clash_free: bool = False) -> FutureJob:
    """Insert one new job as it is (IntegrityError if it clashes with a pending one); with
    ``wake``, also tell listening workers, delivered when the job commits.

    One statement where the database can return the new id: in autocommit mode, one round
    trip (the wake-up rides in it on PostgreSQL). Inside the caller's transaction it runs in a
    savepoint, so that a clash leaves that transaction usable, unless the job is
    ``clash_free`` (its key is new, e.g. a task's random id): then it is one statement there
    too.
    """
    if not can_insert_returning():
        with transaction.atomic():
            job.save(force_insert=True)
            if wake:
                notify()
        return job
    fields = bulk.insert_fields(FutureJob)
    channel = CHANNEL if wake and can_listen() else None
    guard = not clash_free and connection.in_atomic_block
    with transaction.atomic() if guard else contextlib.nullcontext():
        rows = bulk.prep_all([job], fields, add=True)
        job.pk = bulk.insert_rows(FutureJob, rows, fields, returning=_pk_column(), notify=channel)[0]
    job._state.adding = False
    job._state.db = connection.alias
    return job
