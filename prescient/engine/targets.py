"""What every verb needs: the time it acts at, the entity and due time of a new job, one job
locked, and ending one job (or asking its run in flight to end)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

from prescient import slots
from prescient.checks import Check
from prescient.conf import setting
from prescient.exceptions import InvalidEntity, InvalidTime, JobNotFound
from prescient.models import FutureJob

logger = logging.getLogger("prescient.engine.verbs")


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
            f"Check {check.name!r} is about {check.model_label}, got an instance of {label}"
        )
    return label, str(entity.pk)


def due_time(
    check: Check, now: datetime, at: datetime | None = None, delay: timedelta | None = None
) -> datetime:
    """The slot a new job is first due in: ``at``, ``now + delay`` or ``now``, rounded up.

    An ``at`` in the past is allowed: the job is overdue and runs at the next tick (catching up
    on a time that was missed). A negative ``delay`` is refused: it is almost always a sign
    error (``now - then`` for ``then - now``), and "now" is written ``delay=timedelta(0)``.
    """
    if at is not None and delay is not None:
        raise InvalidTime("Give either at or delay, not both")
    if at is not None:
        due = slots.require_aware(at, "at")
    elif delay is not None:
        if not isinstance(delay, timedelta):
            raise InvalidTime(f"delay must be a timedelta, got {type(delay).__name__}")
        if delay < timedelta(0):
            raise InvalidTime(
                f"delay must not be negative, got {delay} (for a time in the past give at=; for now, no delay)"
            )
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
