"""The writer of ``Schedule`` and ``Occurrence`` rows, and of the jobs their occurrences become.

Producing a batch of occurrences is one transaction: the schedules' next occurrences moved on
(each update guarded by the next occurrence it read, so a schedule moved by another process
is not moved twice), one ``Occurrence`` row per occurrence run or skipped (unique per schedule
and instant: the database refuses a second one), and the occurrences' jobs inserted.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction

from prescient.models import FutureJob, Occurrence, Schedule
from prescient.states import State

from .. import bulk
from . import insert_new, lock_workflow, notify
from .jobs import new_job


class ProducedElsewhere(Exception):
    """Another process produced some of these occurrences first; the batch is rolled back."""


@dataclass
class Plan:
    """What one pass does with one due schedule (worked out by :mod:`prescient.engine.recurring`)."""

    schedule: Schedule
    #: The occurrences to run, oldest first, each with the time its job is due.
    run: list[tuple[datetime, datetime]] = field(default_factory=list)
    missed: int = 0
    next_at: datetime | None = None
    due_at: datetime | None = None
    #: Filled in here: occurrences not run because the previous job was still pending.
    skipped: int = 0


# --- schedules ---------------------------------------------------------------------------------


def lock_due(now: datetime, limit: int) -> list[Schedule]:
    """Up to ``limit`` due schedules, oldest due first, locked for the caller's transaction
    (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, so concurrent passes take disjoint batches)."""
    due = Schedule.objects.due(now).order_by("due_at", "id")
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True)
    return list(due[:limit])


def upsert(name: str, fields: dict[str, Any], next_at: datetime, due_at: datetime, now: datetime,
           *, declared: bool) -> Schedule:
    """Create schedule ``name``, or update it (counters and pause kept; next occurrence reset)."""
    with transaction.atomic():
        row = Schedule.objects.select_for_update().filter(name=name).first()
        if row is None:
            row = Schedule(name=name, created_at=now)
        for key, value in fields.items():
            setattr(row, key, value)
        row.next_at, row.due_at, row.updated_at, row.declared = next_at, due_at, now, declared
        row.save()
    return row


def delete(names: Sequence[str]) -> int:
    """Delete the schedules ``names`` (their occurrence rows go with them); returns how many."""
    return Schedule.objects.filter(name__in=list(names)).delete()[1].get(Schedule._meta.label, 0)


def set_paused(name: str, paused_at: datetime | None, next_at: datetime | None = None,
               due_at: datetime | None = None) -> int:
    """Pause (``paused_at``) or resume (None, with the next occurrence after the resume)."""
    changes: dict[str, Any] = {"paused_at": paused_at}
    if next_at is not None:
        changes.update(next_at=next_at, due_at=due_at)
    rows = Schedule.objects.filter(name=name)
    rows = rows.filter(paused_at__isnull=True) if paused_at is not None else rows.filter(paused_at__isnull=False)
    return rows.update(**changes)


def prune_occurrences(before: datetime, limit: int | None = None) -> int:
    """Delete occurrence rows produced before ``before`` (at most ``limit``, oldest first);
    returns how many."""
    expired = Occurrence.objects.filter(produced_at__lt=before)
    if limit is not None:
        expired = Occurrence.objects.filter(pk__in=expired.order_by("produced_at").values("pk")[:limit])
    return expired.delete()[0]


# --- producing occurrences ---------------------------------------------------------------------


def _job(schedule: Schedule, due: datetime, now: datetime, paused: bool) -> FutureJob:
    payload = schedule.payload
    return new_job(
        kind=schedule.kind, entity_name=schedule.entity_name,
        # No key of its own: each occurrence is a job about no entity (a task), under a fresh key.
        entity_key=schedule.entity_key or uuid.uuid4().hex,
        job_exec=schedule.job_exec, workflow=schedule.workflow, paused=paused, due=due, now=now, queue=schedule.queue,
        priority=schedule.priority, payload=dict(payload) if isinstance(payload, dict) else payload,
    )


def _move_schedules(plans: Sequence[Plan]) -> int:
    """Move each schedule to its next occurrence and add up its counters, guarded by the next
    occurrence it was read with; returns how many rows were written."""
    table = connection.ops.quote_name(Schedule._meta.db_table)
    rows = [
        [p.schedule.pk, p.schedule.next_at, p.next_at, p.due_at, len(p.run) - p.skipped, p.skipped, p.missed,
         p.run[-1][0] if p.run else None]
        for p in plans
    ]
    sets = (
        "next_at = v.next_at, due_at = v.due_at, runs = {t}.runs + v.runs, skipped = {t}.skipped + v.skipped, "
        "missed = {t}.missed + v.missed, last_run_at = COALESCE(v.last_run_at, {t}.last_run_at)"
    )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            columns = list(zip(*rows, strict=True))
            cursor.execute(
                f"UPDATE {table} SET {sets.format(t=table)} FROM unnest(%s::bigint[], %s::timestamptz[], "
                "%s::timestamptz[], %s::timestamptz[], %s::bigint[], %s::bigint[], %s::bigint[], "
                "%s::timestamptz[]) AS v (id, old, next_at, due_at, runs, skipped, missed, last_run_at) "
                f"WHERE {table}.id = v.id AND {table}.next_at = v.old",
                [list(column) for column in columns],
            )
            return int(cursor.rowcount)
        next_field = Schedule._meta.get_field("next_at")
        assert isinstance(next_field, models.DateTimeField)
        prep = [
            [next_field.get_db_prep_value(value, connection) if isinstance(value, datetime) else value
             for value in row]
            for row in rows
        ]
        cursor.executemany(
            f"UPDATE {table} SET next_at = %s, due_at = %s, runs = runs + %s, skipped = skipped + %s, "
            "missed = missed + %s, last_run_at = COALESCE(%s, last_run_at) WHERE id = %s AND next_at = %s",
            [[r[2], r[3], r[4], r[5], r[6], r[7], r[0], r[1]] for r in prep],
        )
        return int(cursor.rowcount)


def produce(plans: Sequence[Plan], now: datetime) -> int:
    """Write one batch of plans (call in a transaction, the schedules locked); returns how many
    jobs were inserted. Raises :class:`ProducedElsewhere` (after undoing nothing: the caller's
    transaction must roll back) when another process moved a schedule first."""
    keyed = [p for p in plans if p.run and p.schedule.entity_key]
    pending: set[tuple[str, str, str]] = set()
    if keyed:
        pending = set(
            FutureJob.objects.filter(
                job_exec__in={p.schedule.job_exec for p in keyed}, entity_key__in={p.schedule.entity_key for p in keyed}
            ).values_list("entity_name", "entity_key", "job_exec")
        )
    paused = {name: lock_workflow(name) for name in sorted({p.schedule.workflow for p in plans if p.run} - {""})}
    jobs: list[FutureJob] = []
    occurrences: list[Occurrence] = []
    for plan in plans:
        s = plan.schedule
        key = (s.entity_name, s.entity_key, s.job_exec)
        for at, due in plan.run:
            ran = not s.entity_key or key not in pending
            if ran:
                jobs.append(_job(s, due, now, paused.get(s.workflow, False)))
                if s.entity_key:
                    pending.add(key)  # a second occurrence in this batch finds it pending
            else:
                plan.skipped += 1
            outcome = Occurrence.Outcome.RAN if ran else Occurrence.Outcome.SKIPPED
            occurrences.append(Occurrence(schedule=s, at=at, outcome=outcome, produced_at=now))
    if _move_schedules(plans) != len(plans):
        raise ProducedElsewhere()
    Occurrence.objects.bulk_create(occurrences, batch_size=1000)  # IntegrityError: produced already
    written = 0
    for chunk in bulk.chunks(jobs, 1000):
        written += insert_new(chunk, returning=False) or 0
    if written and any(job.next_check_at <= now and job.state == State.SCHEDULED for job in jobs):
        notify()
    return written


def make_due_now(name: str, now: datetime) -> Schedule | None:
    """Bring schedule ``name``'s next occurrence forward to ``now`` (run it at the next pass)."""
    Schedule.objects.filter(name=name).update(due_at=now)
    return Schedule.objects.filter(name=name).first()
