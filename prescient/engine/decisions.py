"""What a run leads to: a :class:`Decision` (an event of the transition table), the failure
rule shared by every kind, and the counts a sweep reports (:class:`TickSummary`)."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prescient.cleaning import clean_text
from prescient.conf import setting
from prescient.retries import call_handler, get_handler
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
#: The exception class of a run whose process died under it (``os._exit``, a segfault, …).
CHILD_DIED = "prescient.exceptions.ChildDied"


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
    #: A failed run: the exception itself, when there is one (never stored): for whoever
    #: announces the failure in the process that decided it (django.tasks' ``task_finished``).
    exception: BaseException | None = None


@dataclass
class TickSummary:
    """Counts per outcome (and ``rescheduled``, ``retried``, ``discarded``, ``handed_back``,
    ``slept``), with what the rescuer did to stale claims meanwhile (``reclaimed``,
    ``handed_back``, ``buried``, ``slept``, ``ended``: see :meth:`add_rescued`)."""

    counts: Counter[str] = field(default_factory=Counter)
    #: The rescuer's share of ``counts``: shown by :meth:`line`, not counted as processed.
    rescued: Counter[str] = field(default_factory=Counter)
    #: The operator's signal that stopped the pass before its end (0: none).
    stopped_by: int = 0

    def add_rescued(self, counts: Counter[str]) -> None:
        """Add what the rescuer did (:func:`prescient.maintenance.rescuer.rescue`)."""
        self.counts.update(counts)
        self.rescued.update(counts)

    def copy(self) -> TickSummary:
        return TickSummary(Counter(self.counts), Counter(self.rescued), self.stopped_by)

    def since(self, earlier: TickSummary) -> TickSummary:
        """What was counted after ``earlier`` (a :meth:`copy` of this summary taken then)."""
        return TickSummary(self.counts - earlier.counts, self.rescued - earlier.rescued, self.stopped_by)

    @property
    def processed(self) -> int:
        """Jobs this process's runs settled (not those it handed back, nor the rescuer's)."""
        return sum(v - self.rescued.get(k, 0) for k, v in self.counts.items() if k not in (BURIED, HANDED_BACK))

    def fields(self) -> dict[str, int]:
        """``processed`` and the counts, in the order :meth:`line` prints them (``--json``)."""
        # Expectations' outcomes only when some ended so: the line of a tick without them is as it was.
        sometimes = (Outcome.MET.value, Outcome.MISSED.value)
        order = [o.value for o in Outcome if o not in sometimes] + [RESCHEDULED, RETRIED, BURIED, DISCARDED]
        order.extend(key for key in (*sometimes, RECLAIMED, HANDED_BACK, SLEPT, ENDED) if self.counts.get(key))
        return {"processed": self.processed, **{key: self.counts.get(key, 0) for key in order}}

    def line(self) -> str:
        return "prescient tick: " + " ".join(f"{key}={count}" for key, count in self.fields().items())


def describe(exc: BaseException) -> str:
    """``TypeName: message`` of an exception, for the job's error fields (whatever its
    ``__str__`` does: it is host code)."""
    try:
        text = str(exc)
    except BaseException as failed:
        text = f"<its str() raised {type(failed).__name__}>"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def safe_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, whatever the value's ``__repr__`` does."""
    try:
        text = repr(value)
    except BaseException as exc:  # a job's value: its __repr__ is host code
        text = f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def type_path(exc: BaseException) -> str:
    """The dotted path of the class of ``exc``, e.g. ``builtins.ValueError``."""
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def record_error(job: FutureJob, error: str, now: datetime, exception_path: str = "", *, ran: bool = False) -> None:
    """Keep ``error`` (cleaned: see :mod:`prescient.cleaning`) as the job's last error and
    among its recent ones, with the dotted path of its exception's class and the number of the
    run it ended (``ran``: this failure is a run of the job's own code, counted when it settles)."""
    error = clean_text(error)
    job.last_error = error
    kept = int(setting("RECENT_ERRORS"))
    entry: dict[str, Any] = {"at": now.isoformat(), "error": error}
    if exception_path:
        entry["exception_class_path"] = clean_text(exception_path, 300)
    if ran:
        entry["run"] = job.run_count + 1  # counted when the run settles
    job.recent_errors = ([*job.recent_errors, entry])[-kept:] if kept else []


def crashes_in_a_row(job: FutureJob) -> int:
    """How many of the job's last runs, one after the other, ended with their process
    (:data:`CHILD_DIED`), by its recent errors."""
    count, expected = 0, None
    for entry in reversed(job.recent_errors or []):
        if not isinstance(entry, dict) or entry.get("exception_class_path") != CHILD_DIED:
            break
        run = entry.get("run")
        if not isinstance(run, int) or (expected is not None and run != expected):
            break
        count, expected = count + 1, run - 1
    return count


def failure(
    decision: Decision, definition: Check | None, error: str, now: datetime, *,
    exception: BaseException | None = None, exception_path: str = "", traceback: str = "",
) -> Decision:
    """Make ``decision`` a failed run: count it, keep the error, and ask the error handler
    whether to retry (``definition`` is None when the job's check is no longer known).

    The failure is data on the decision: ``exception_path``, the dotted path of the class of
    the exception the run raised (by default that of ``exception``; RunFailed when it raised
    none), and its ``traceback`` (empty when none); a job it ends keeps them in its history row.
    The error handler is given ``exception`` itself when it takes an ``exception`` argument.

    A run whose process died under it (:data:`CHILD_DIED`) ``MAX_CRASHES`` times in a row buries
    its job instead (a person decides): running it again would only kill another process.
    An error handler that raises, cannot be imported or answers anything but None or an aware
    datetime fails the job, with a reason naming the handler.
    """
    job = decision.job
    error = clean_text(error)
    decision.error = error
    if not exception_path:
        exception_path = type_path(exception) if exception is not None else RUN_FAILED
    decision.exception_path = clean_text(exception_path, 300)
    decision.traceback = clean_text(traceback) if traceback else ""
    decision.exception = exception
    job.failure_count += 1
    record_error(job, error, now, decision.exception_path, ran=decision.ran)
    if not decision.ran:
        # Nothing of the job's own code ran (unknown check or task, missing model): say so, as
        # a raising check is logged.
        logger.warning(
            "job id=%s (%s %s) failed without running: %s", job.pk, job.kind, job.job_exec, error
        )
    limit = int(setting("MAX_CRASHES"))
    if decision.exception_path == CHILD_DIED and crashes_in_a_row(job) >= limit:
        decision.event, decision.outcome = Event.BURY, ""
        decision.reason = f"its runs ended their process {limit} times in a row (MAX_CRASHES): buried"
        job.last_error = clean_text(f"{error}; {decision.reason}")
        logger.error("job id=%s (%s) %s", job.pk, job.job_exec, decision.reason)
        return decision
    retry_at, given_up = _ask_handler(decision, definition, now, exception)
    if retry_at is None:
        decision.event, decision.outcome = Event.FINISH, Outcome.FAILED
        # A handler may say why it gave up (error_rate does); an invalid handler is named.
        decision.reason = given_up or job.end_reason
    else:
        decision.event = Event.RETRY
        # The handler's time is kept as it is: the built-in handlers round to slots themselves.
        decision.next_check_at = retry_at
    return decision


def _not_a_time(value: Any) -> str:
    """What ``value`` is when it is not an aware datetime (in words), or ""."""
    try:
        if isinstance(value, datetime):
            if value.tzinfo is not None and value.utcoffset() is not None:
                return ""
            return f"a naive datetime ({value.isoformat()})"
    except BaseException as exc:  # a tzinfo or subclass of the host's
        return f"a datetime whose time zone raised {type(exc).__name__}"
    return f"{type(value).__name__} ({safe_repr(value)})"


def _ask_handler(
    decision: Decision, definition: Check | None, now: datetime, exception: BaseException | None
) -> tuple[datetime | None, str]:
    """``(when to retry or None, why the job fails when it is the handler's fault)``: the job's
    error handler asked, whatever it does (it is host code: it may raise anything)."""
    job = decision.job
    name = f"ERROR_HANDLER {setting('ERROR_HANDLER')!r}"
    try:
        if definition is not None and definition.error_handler:
            handler = definition.error_handler
            name = f"the error handler {getattr(handler, '__qualname__', handler)!r} of {definition.name!r}"
        else:
            handler = get_handler()
    except (ImportError, TypeError) as exc:  # started with --skip-checks, or changed since
        logger.error("job id=%s (%s) failed: %s", job.pk, job.job_exec, exc)
        return None, clean_text(str(exc), 2000)
    try:
        retry_at = call_handler(handler, job, definition, now, exception)
    except BaseException as exc:  # the handler is host code: anything it raises fails the job
        why = f"{name} raised {describe(exc)}"
        logger.error("job id=%s (%s) failed: %s", job.pk, job.job_exec, why, exc_info=exc)
        return None, clean_text(why, 2000)
    if retry_at is None:
        return None, ""
    what = _not_a_time(retry_at)
    if what:
        why = f"{name} returned {what}; it must return an aware datetime or None"
        logger.error("job id=%s (%s) failed: %s", job.pk, job.job_exec, why)
        return None, clean_text(why, 2000)
    return retry_at, ""
