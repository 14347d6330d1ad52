"""Retry policies (error handlers): what follows a failed run. Choose one with ``PRESCIENT["ERROR_HANDLER"]``.

A handler is called as ``handler(job, check, now)`` after a failed run, with
``job.failure_count`` and ``job.recent_errors`` already including that failure (``check`` is
``None`` when the check is no longer registered); a handler that takes an ``exception``
argument (or ``**kwargs``) is also given the exception itself as ``exception=``: what the run
raised (a ``ConnectionError``, a ``SystemExit``…), a :class:`~prescient.exceptions.CheckTimeout`
for a run stopped at its timeout, a :class:`~prescient.exceptions.RunFailed` (``ChildDied``)
for a run whose process or worker was lost. It returns when to try again (an aware datetime,
kept as it is: the built-ins round it to a slot with :mod:`prescient.slots`) or ``None`` to end
the job with outcome ``failed``; a handler that gives up may say why in ``job.end_reason``,
which the history row keeps as its ``reason`` (``error_rate`` does). A handler that raises, or
returns anything else, fails the job with a reason that names it.

The built-ins count their waits from the slot being processed (the boundary at or before
``now``), as a check's returned timedelta is: a run that fails at 05:00:01 with a one-slot
wait is retried at 05:15 (15-minute slots), not a slot later because the run came a second
after the boundary. ``error_rate`` counts the errors themselves by their real times.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from prescient import slots
from prescient.conf import setting

if TYPE_CHECKING:
    from prescient.checks import Check
    from prescient.models import FutureJob

logger = logging.getLogger(__name__)

#: ``handler(job, check, now)``, or ``handler(job, check, now, exception=None)``.
ErrorHandler = Callable[..., datetime | None]


def _takes_exception(handler: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): called the old way
        return False
    return any(p.name == "exception" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def call_handler(
    handler: ErrorHandler, job: FutureJob, check: Check | None, now: datetime, exception: BaseException | None
) -> datetime | None:
    """Ask ``handler`` when to retry, giving it the exception when it takes one."""
    if _takes_exception(handler):
        return handler(job, check, now, exception=exception)
    return handler(job, check, now)


def _retries(check: Check | None) -> int:
    return check.retries_allowed if check is not None else int(setting("MAX_RETRIES"))


def retry_next_slot(
    job: FutureJob, check: Check | None, now: datetime, exception: BaseException | None = None
) -> datetime | None:
    """Retry at the next slot; fail once the job has failed more than its retries allow."""
    if job.failure_count > _retries(check):
        return None
    return slots.next_after(now, int(setting("SLOT_MINUTES")))


def exponential_backoff(
    job: FutureJob, check: Check | None, now: datetime, exception: BaseException | None = None
) -> datetime | None:
    """Retry 1, 2, 4, 8 … slots after the slot being processed; fail once the job has failed more
    than its retries allow."""
    if job.failure_count > _retries(check):
        return None
    slot_minutes = int(setting("SLOT_MINUTES"))
    wait = timedelta(minutes=slot_minutes) * (2 ** max(job.failure_count - 1, 0))
    return slots.after_slot(wait, now, slot_minutes)


def error_rate(
    max_errors: int = 8, within: timedelta = timedelta(hours=4), retry_after: timedelta = timedelta(minutes=10)
) -> ErrorHandler:
    """A handler that fails the job once it has had ``max_errors`` failed runs within
    ``within`` (counting this one), and otherwise retries it ``retry_after`` after the slot
    being processed, rounded up to a slot (strictly after that slot). The defaults are
    Metafora's: 8 errors in 4 hours, else 10 minutes later.

    Failed runs are counted from the job's recent errors, so ``RECENT_ERRORS`` must keep at
    least ``max_errors`` of them (the default keeps 10); with fewer, the job fails once all it
    keeps are within ``within`` (and a warning is logged).
    """
    if max_errors < 1:
        raise ValueError(f"max_errors must be at least 1, got {max_errors}")
    if within <= timedelta(0) or retry_after < timedelta(0):
        raise ValueError("within must be positive and retry_after not negative")

    def handler(
        job: FutureJob, check: Check | None, now: datetime, exception: BaseException | None = None
    ) -> datetime | None:
        kept = int(setting("RECENT_ERRORS"))
        if kept < max_errors:  # not enough errors kept to count: fail at as many as are kept
            logger.warning("error_rate(%s, ...) needs RECENT_ERRORS >= %s (it is %s)", max_errors, max_errors, kept)
        since = now - within
        recent = 0
        for entry in job.recent_errors:
            try:
                at = datetime.fromisoformat(entry["at"])
            except (KeyError, TypeError, ValueError):
                continue
            if at.tzinfo is not None and at > since:
                recent += 1
        limit = min(max_errors, max(kept, 1))
        if recent >= limit:
            job.end_reason = f"error rate exceeded: {recent} failed runs within {within} (the limit is {limit})"
            return None
        return slots.after_slot(retry_after, now, int(setting("SLOT_MINUTES")))

    handler.__qualname__ = handler.__name__ = f"error_rate({max_errors}, {within}, {retry_after})"
    return handler


def get_handler() -> ErrorHandler:
    """The configured error handler (ImportError when ``ERROR_HANDLER`` cannot be imported)."""
    path = setting("ERROR_HANDLER")
    try:
        handler: ErrorHandler = import_string(path)
    except ImportError as exc:
        raise ImportError(f"ERROR_HANDLER {path!r} cannot be imported: {exc}") from exc
    if not callable(handler):
        raise TypeError(f"ERROR_HANDLER {path!r} is a {type(handler).__name__}, not a callable")
    return handler
