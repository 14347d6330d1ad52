"""What a run leads to: a :class:`Decision` (an event of the transition table), the failure
rule shared by every kind, and the counts a sweep reports (:class:`TickSummary`)."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from prescient import slots
from prescient.cleaning import clean_text
from prescient.conf import setting
from prescient.retries import get_handler
from prescient.states import Event, Outcome

if TYPE_CHECKING:
    from prescient.checks import Check
    from prescient.models import FutureJob

logger = logging.getLogger("prescient.engine")

#: Summary keys besides the outcomes.
RESCHEDULED, RETRIED, DISCARDED, BURIED = "rescheduled", "retried", "discarded", "buried"
HANDED_BACK, SLEPT = "handed_back", "slept"
#: What the rescuer does to a stale claim, in the words of docs/states.md (with HANDED_BACK,
#: BURIED and SLEPT): a lost worker's run reclaimed, or the job ended (a kill or cancel that was
#: pending, or failed past its retries).
RECLAIMED, ENDED = "reclaimed", "ended"
RESCUED = (RECLAIMED, HANDED_BACK, BURIED, SLEPT, ENDED)
SUMMARY_KEY: dict[str, str] = {
    Event.RESCHEDULE: RESCHEDULED, Event.RETRY: RETRIED, Event.HAND_BACK: HANDED_BACK, Event.SLEEP: SLEPT,
    Event.BURY: BURIED, Event.RECLAIM: RECLAIMED,
}
#: The exception class of a failure that no Python exception of the job's raised (a lost worker,
#: a child that died): what a failure without an ``exception_path`` of its own is recorded as.
RUN_FAILED = "prescient.exceptions.RunFailed"
#: The exception class of a run stopped at its timeout.
CHECK_TIMEOUT = "prescient.exceptions.CheckTimeout"


@dataclass
class Decision:
    """What a run leads to: an event of the transition table and its details."""

    job: FutureJob
    event: str
    outcome: str = ""
    next_check_at: datetime | None = None
    error: str = ""
    seconds: float = 0.0
    #: Whether the job's own code was called (a run is counted only then).
    ran: bool = False
    #: Why the run ends the job, kept as its history row's ``reason`` (a horizon's asked time, an
    #: error handler that gave up and said why in ``job.end_reason``).
    reason: str = ""
    #: Outcome ``horizon``: the next check the check asked for (the history's ``asked_check_at``).
    asked_check_at: datetime | None = None
    #: A failed run: the dotted path of its exception's class and its traceback (see
    #: :func:`failure`), kept by the history row of a job it ends.
    exception_path: str = ""
    traceback: str = ""


@dataclass
class TickSummary:
    """Counts per outcome (and ``rescheduled``, ``retried``, ``discarded``, ``handed_back``,
    ``slept``), with what the rescuer did to stale claims meanwhile (``reclaimed``,
    ``handed_back``, ``buried``, ``slept``, ``ended``: see :meth:`add_rescued`)."""

    counts: Counter[str] = field(default_factory=Counter)
    #: The rescuer's share of ``counts``: shown by :meth:`line`, not counted as processed.
    rescued: Counter[str] = field(default_factory=Counter)

    def add_rescued(self, counts: Counter[str]) -> None:
        """Add what the rescuer did (:func:`prescient.maintenance.rescuer.rescue`)."""
        self.counts.update(counts)
        self.rescued.update(counts)

    @property
    def processed(self) -> int:
        """Jobs this process's runs settled (not those it handed back, nor the rescuer's)."""
        return sum(v - self.rescued.get(k, 0) for k, v in self.counts.items() if k not in (BURIED, HANDED_BACK))

    def line(self) -> str:
        # Expectations' outcomes only when some ended so: the line of a tick without them is as it was.
        sometimes = (Outcome.MET.value, Outcome.MISSED.value)
        order = [o.value for o in Outcome if o not in sometimes] + [RESCHEDULED, RETRIED, BURIED, DISCARDED]
        order.extend(key for key in (*sometimes, RECLAIMED, HANDED_BACK, SLEPT, ENDED) if self.counts.get(key))
        parts = [f"{key}={self.counts.get(key, 0)}" for key in order]
        return f"prescient tick: processed={self.processed} " + " ".join(parts)


def type_path(exc: BaseException) -> str:
    """The dotted path of the class of ``exc``, e.g. ``builtins.ValueError``."""
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def record_error(job: FutureJob, error: str, now: datetime) -> None:
    """Keep ``error`` (cleaned: see :mod:`prescient.cleaning`) as the job's last error and
    among its recent ones."""
    error = clean_text(error)
    job.last_error = error
    kept = int(setting("RECENT_ERRORS"))
    job.recent_errors = ([*job.recent_errors, {"at": now.isoformat(), "error": error}])[-kept:]


def failure(
    decision: Decision, definition: Check | None, error: str, now: datetime, *,
    exception_path: str = "", traceback: str = "",
) -> Decision:
    """Make ``decision`` a failed run: count it, keep the error, and ask the error handler
    whether to retry (``definition`` is None when the job's check is no longer known).

    The failure is data on the decision: ``exception_path``, the dotted path of the class of
    the exception the run raised (RunFailed when it raised none), and its ``traceback`` (empty
    when none); a job it ends keeps them in its history row."""
    job = decision.job
    error = clean_text(error)
    decision.error = error
    decision.exception_path = clean_text(exception_path or RUN_FAILED, 300)
    decision.traceback = clean_text(traceback) if traceback else ""
    job.failure_count += 1
    record_error(job, error, now)
    handler = definition.error_handler if definition is not None and definition.error_handler else get_handler()
    retry_at = handler(job, definition, now)
    if retry_at is None:
        decision.event, decision.outcome = Event.FINISH, Outcome.FAILED
        decision.reason = job.end_reason  # a handler may say why it gave up (error_rate does)
    else:
        decision.event = Event.RETRY
        # The handler's time is kept as it is: the built-in handlers round to slots themselves.
        decision.next_check_at = slots.require_aware(retry_at, "the error handler's retry time")
    if not decision.ran:
        # Nothing of the job's own code ran (unknown check or task, missing model): say so, as
        # a raising check is logged.
        logger.warning(
            "job id=%s (%s %s) failed without running: %s", job.pk, job.kind, job.job_exec, error
        )
    return decision
