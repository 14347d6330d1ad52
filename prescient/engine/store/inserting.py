"""Inserting new jobs: one statement each time, the wake-up of listening workers in it."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any, cast

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
    if returning and not can_insert_returning():
        return None
    fields = bulk.insert_fields(FutureJob)
    rows = bulk.prep_all(jobs, fields, add=True)
    if not returning:
        return _insert_rows(rows, fields, wake)
    pks = bulk.insert_rows(
        FutureJob, rows, fields, skip_conflicts_on=_one_pending_job_columns(), returning=_pk_column(),
        notify=CHANNEL if wake and can_listen() else None,
    )
    if pks:
        job = jobs[0]
        job.pk = pks[0]
        job._state.adding = False
        job._state.db = connection.alias
    return len(pks)


def insert_copies(job: FutureJob, keys: Sequence[tuple[str, str]], *, wake: bool = False) -> int:
    """Insert, in one statement, a copy of the unsaved ``job`` for each ``(entity_name,
    entity_key)`` of ``keys``, skipping any that already has a pending job; returns how many were
    written. ``wake`` as for :func:`insert_new`.

    The job's values are prepared once. On PostgreSQL they travel once too, the keys as two
    arrays (``INSERT … SELECT <values>, v.name, v.key FROM unnest(…)``): a batch of a thousand
    jobs is no thousand model instances, and no thousand copies of each value to send.
    """
    if not keys:
        return 0
    fields = bulk.insert_fields(FutureJob)
    [row] = bulk.prep_all([job], fields, add=True)
    name_at, key_at = _key_positions()
    if connection.vendor != "postgresql" or not can_insert_returning():
        rows = []
        for name, key in keys:
            copy = row.copy()
            copy[name_at], copy[key_at] = name, key
            rows.append(copy)
        return _insert_rows(rows, fields, wake)
    params: list[Any] = [value for i, value in enumerate(row) if i not in (name_at, key_at)]
    params += [[name for name, _ in keys], [key for _, key in keys]]
    channel = CHANNEL if wake and can_listen() else None
    if channel is not None:
        params.append(channel)
    with connection.cursor() as cursor:
        cursor.execute(_copies_sql(channel is not None), params)
        return len(cursor.fetchall())


def _insert_rows(rows: list[list[Any]], fields: tuple[bulk.Field, ...], wake: bool) -> int:
    if not can_insert_returning():
        with transaction.atomic():
            before = FutureJob.objects.count()
            bulk.insert_rows(FutureJob, rows, fields, skip_conflicts_on=_one_pending_job_columns())
            written = FutureJob.objects.count() - before
            if written and wake:
                notify()
        return written
    return len(bulk.insert_rows(
        FutureJob, rows, fields, skip_conflicts_on=_one_pending_job_columns(), returning=_pk_column(),
        notify=CHANNEL if wake and can_listen() else None,
    ))


@functools.cache
def _key_positions() -> tuple[int, int]:
    names = [f.name for f in bulk.insert_fields(FutureJob)]
    return names.index("entity_name"), names.index("entity_key")


@functools.cache
def _copies_sql(wake: bool) -> str:
    """The statement of :func:`insert_copies` on PostgreSQL (its text never changes)."""
    qn = connection.ops.quote_name
    fields = bulk.insert_fields(FutureJob)
    name_at, key_at = _key_positions()
    values = [
        "v.n" if i == name_at else "v.k" if i == key_at else f"%s::{f.cast_db_type(connection)}"
        for i, f in enumerate(fields)
    ]
    name_type, key_type = (fields[i].cast_db_type(connection) for i in (name_at, key_at))
    sql = (
        f"INSERT INTO {qn(FutureJob._meta.db_table)} ({', '.join(bulk.quote_column(f) for f in fields)}) "
        f"SELECT {', '.join(values)} FROM unnest(%s::{name_type}[], %s::{key_type}[]) AS v (n, k) "
        f"ON CONFLICT ({', '.join(qn(c) for c in _one_pending_job_columns())}) DO NOTHING RETURNING {qn(_pk_column())}"
    )
    if wake:
        sql = f"WITH written AS ({sql}) SELECT {qn(_pk_column())}, pg_notify(%s, '') FROM written"
    return sql


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
