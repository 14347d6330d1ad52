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


def insert_new(jobs: list[FutureJob], *, returning: bool) -> int | None:
    """Insert ``jobs`` in one statement, skipping any that already has a pending job; returns
    how many were written. With ``returning`` (a single job), also sets its pk, or returns None
    when this database cannot (the caller then saves it in a transaction)."""
    if returning and not can_insert_returning():
        return None
    meta = FutureJob._meta
    conflict = _one_pending_job_columns()
    fields = bulk.insert_fields(FutureJob)
    rows = bulk.prep_all(jobs, fields, add=True)
    if not can_insert_returning():
        # Without RETURNING (older SQLite) the rows written are counted instead.
        before = FutureJob.objects.count()
        bulk.insert_rows(FutureJob, rows, fields, skip_conflicts_on=conflict)
        return FutureJob.objects.count() - before
    pk = meta.pk
    assert pk is not None
    pks = bulk.insert_rows(FutureJob, rows, fields, skip_conflicts_on=conflict, returning=pk.column)
    if returning and pks:
        job = jobs[0]
        job.pk = pks[0]
        job._state.adding = False
        job._state.db = connection.alias
    return len(pks)


def insert(job: FutureJob, *, wake: bool = False) -> FutureJob:
    """Insert one new job as it is (IntegrityError if it clashes with a pending one); with
    ``wake``, also tell listening workers, delivered when the job commits.

    One statement where the database can return the new id: in autocommit mode, one round
    trip (the wake-up rides in it on PostgreSQL). Inside the caller's transaction, it runs
    in a savepoint, so that a clash leaves that transaction usable.
    """
    if not can_insert_returning():
        with transaction.atomic():
            job.save(force_insert=True)
            if wake:
                notify()
        return job
    pk = FutureJob._meta.pk
    assert pk is not None
    fields = bulk.insert_fields(FutureJob)
    channel = CHANNEL if wake and can_listen() else None
    with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
        rows = bulk.prep_all([job], fields, add=True)
        job.pk = bulk.insert_rows(FutureJob, rows, fields, returning=pk.column, notify=channel)[0]
    job._state.adding = False
    job._state.db = connection.alias
    return job
