"""Recurring schedules: saving, stopping, pausing them, and producing their occurrences.

A schedule's next occurrence lives in its row (``next_at``; ``due_at`` is it rounded up to a
slot). Any tick or worker produces what is due (:func:`produce`, run by the upkeep service
:mod:`prescient.maintenance.recurring`): each occurrence becomes a job of its own. Two
processes at once produce an occurrence once: the rows are locked (``SKIP LOCKED`` on
PostgreSQL), each schedule's update is guarded by the occurrence it read, and the
``Occurrence`` table's unique constraint refuses a second row for one occurrence.

Missed occurrences (due in a slot before the current one: nothing ran then) follow the
schedule's ``catch_up``: ``latest`` runs the newest due, ``all`` each, ``skip`` only those of
the current slot. Each not run is counted as ``missed``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from prescient import cron, recurrence, slots
from prescient.conf import setting
from prescient.exceptions import PrescientError, closest, did_you_mean
from prescient.models import Schedule
from prescient.recurrence import Spec

from .store import schedules as writer

logger = logging.getLogger(__name__)

#: Occurrences worked out per schedule and pass at most (a long outage is caught up over passes).
MAX_OCCURRENCES = 10_000


class ScheduleNotFound(PrescientError, LookupError):
    """No schedule of that name. ``suggestions``: the known names closest to it."""

    def __init__(self, name: object, known: Iterable[str] = ()) -> None:
        self.name = name
        self.suggestions = closest(name, known)
        super().__init__(f"No schedule named {name!r}.{did_you_mean(self.suggestions)}".rstrip("."))


@dataclass
class Produced:
    """What :func:`produce` did."""

    schedules: int = 0
    runs: int = 0
    skipped: int = 0
    missed: int = 0

    @property
    def total(self) -> int:
        return self.runs + self.skipped + self.missed


def _slot_minutes() -> int:
    return int(setting("SLOT_MINUTES"))


def _now(now: datetime | None) -> datetime:
    return timezone.now() if now is None else slots.require_aware(now, "now")


def next_after(schedule: Schedule, after: datetime) -> datetime:
    return cron.next_occurrence(schedule.cron, schedule.every_seconds, schedule.timezone, after)


def upcoming(schedule: Schedule, count: int = 5) -> list[datetime]:
    """The schedule's next ``count`` occurrences, from its stored next one."""
    found = [schedule.next_at]
    while len(found) < count:
        found.append(next_after(schedule, found[-1]))
    return found


# --- the verbs ---------------------------------------------------------------------------------


def save(spec: Spec, *, now: datetime | None = None, declared: bool = False) -> Schedule:
    """Create or update the schedule of ``spec``: its first occurrence is the first one strictly
    after ``now``. InvalidSchedule (writing nothing) if ``spec`` is not valid."""
    now = _now(now)
    fields = spec.fields(_slot_minutes())
    first = cron.next_occurrence(fields["cron"], fields["every_seconds"], fields["timezone"], now)
    row = writer.upsert(spec.name, fields, first, slots.round_up(first, _slot_minutes()), now, declared=declared)
    logger.info("schedule %s saved, next occurrence %s", spec.name, first.isoformat())
    return row


def stop(name: str) -> bool:
    """Remove schedule ``name``; True if there was one."""
    return writer.delete([name]) > 0


def pause(name: str, *, now: datetime | None = None) -> bool:
    """Pause schedule ``name``: it produces nothing, and counts nothing missed, until resumed.
    True if it was running. ScheduleNotFound if there is none."""
    _get(name)
    return writer.set_paused(name, _now(now)) > 0


def resume(name: str, *, now: datetime | None = None) -> bool:
    """Resume schedule ``name`` at its first occurrence after ``now``; True if it was paused."""
    row, now = _get(name), _now(now)
    first = next_after(row, now)
    return writer.set_paused(name, None, first, slots.round_up(first, _slot_minutes())) > 0


def run_next_now(name: str, *, now: datetime | None = None) -> Schedule:
    """Make schedule ``name``'s next occurrence due now: the next pass runs it."""
    _get(name)
    row = writer.make_due_now(name, _now(now))
    assert row is not None
    return row


def _get(name: str) -> Schedule:
    row = Schedule.objects.filter(name=name).first()
    if row is None:
        raise ScheduleNotFound(name, Schedule.objects.values_list("name", flat=True)[:10_000])
    return row


# --- producing occurrences ---------------------------------------------------------------------


def plan(schedule: Schedule, now: datetime, slot_minutes: int) -> writer.Plan:
    """What a pass at ``now`` does with a due schedule: which occurrences run, how many were
    missed, and where its next occurrence is."""
    slot = timedelta(minutes=slot_minutes)
    due: list[datetime] = [schedule.next_at]  # due, or brought forward by run_next_now
    at = next_after(schedule, schedule.next_at)
    while slots.round_up(at, slot_minutes) <= now and len(due) < MAX_OCCURRENCES:
        due.append(at)
        at = next_after(schedule, at)
    if schedule.catch_up == "all":
        run = due
    elif schedule.catch_up == "skip":
        run = [o for o in due if slots.round_up(o, slot_minutes) > now - slot]
    else:
        run = due[-1:]
    return writer.Plan(
        schedule=schedule,
        run=[(o, min(slots.round_up(o, slot_minutes), now)) for o in run],
        missed=len(due) - len(run),
        next_at=at,
        due_at=slots.round_up(at, slot_minutes),
    )


def produce(now: datetime, *, batch_size: int = 1000) -> Produced:
    """Produce every occurrence due by ``now``: jobs for those that run, counters for the rest.
    Batch by batch, each in its own transaction; a batch another process got to first is
    rolled back and left to it."""
    done = Produced()
    slot_minutes = _slot_minutes()
    while True:
        try:
            with transaction.atomic():
                rows = writer.lock_due(now, batch_size)
                plans = [plan(row, now, slot_minutes) for row in rows]
                if plans:
                    writer.produce(plans, now)
        except (writer.ProducedElsewhere, IntegrityError):
            logger.info("schedules: another process produced this batch first")
            return done
        for p in plans:
            done.runs += len(p.run) - p.skipped
            done.skipped += p.skipped
            done.missed += p.missed
        done.schedules += len(plans)
        if len(rows) < batch_size:
            return done


def sync_declared(now: datetime) -> int:
    """Keep the schedules declared in code (``@prescient.periodic``) in the database: created,
    updated when their declaration changed, removed when it is gone; returns how many rows
    changed. Nothing is removed until every declaration is known to be imported."""
    declared = recurrence.declared()
    slot_minutes = _slot_minutes()
    rows = Schedule.objects.filter(Q(name__in=list(declared)) | Q(declared=True))
    stored = {row.name: row for row in rows}
    changed = 0
    for name, spec in declared.items():
        row = stored.get(name)
        try:
            fields = spec.fields(slot_minutes)
        except PrescientError:
            logger.exception("declared schedule %s is not valid", name)
            continue
        if row is None or not row.declared or any(getattr(row, key) != value for key, value in fields.items()):
            save(spec, now=now, declared=True)
            changed += 1
    if recurrence.loaded():
        gone = [name for name, row in stored.items() if row.declared and name not in declared]
        changed += writer.delete(gone) if gone else 0
    return changed
