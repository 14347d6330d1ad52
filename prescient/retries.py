"""Retry policies (error handlers): what follows a failed run. Choose one with ``PRESCIENT["ERROR_HANDLER"]``.

A handler is called as ``handler(job, check, now)`` after a failed run, with
``job.failure_count`` and ``job.recent_errors`` already including that failure (``check`` is
``None`` when the check is no longer registered). It returns when to try again (an aware
datetime, kept as it is: the built-ins round it to a slot with :mod:`prescient.slots`) or
``None`` to end the job with outcome ``failed``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.utils.module_loading import import_string

from prescient import slots
from prescient.conf import setting

if TYPE_CHECKING:
    from prescient.checks import Check
    from prescient.models import FutureJob

ErrorHandler = Callable[["FutureJob", "Check | None", datetime], datetime | None]


def _retries(check: Check | None) -> int:
    return check.retries_allowed if check is not None else int(setting("MAX_RETRIES"))


def retry_next_slot(job: FutureJob, check: Check | None, now: datetime) -> datetime | None:
    """Retry at the next slot; fail once the job has failed more than its retries allow."""
    if job.failure_count > _retries(check):
        return None
    return slots.next_after(now, int(setting("SLOT_MINUTES")))


def exponential_backoff(job: FutureJob, check: Check | None, now: datetime) -> datetime | None:
    """Retry after 1, 2, 4, 8 … slots; fail once the job has failed more than its retries allow."""
    if job.failure_count > _retries(check):
        return None
    slot_minutes = int(setting("SLOT_MINUTES"))
    wait = timedelta(minutes=slot_minutes) * (2 ** max(job.failure_count - 1, 0))
    return slots.next_check(now + wait, now, slot_minutes)


def get_handler() -> ErrorHandler:
    """The configured error handler."""
    handler: ErrorHandler = import_string(setting("ERROR_HANDLER"))
    return handler
