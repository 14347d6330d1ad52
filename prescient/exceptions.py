"""Errors raised by prescient. All derive from :class:`PrescientError`."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def closest(name: object, known: Iterable[str], count: int = 3) -> list[str]:
    """The known names most like ``name`` (a typo's likely intent), best first."""
    if not isinstance(name, str) or not name:
        return []
    return difflib.get_close_matches(name, sorted(set(known)), n=count, cutoff=0.75)


def did_you_mean(suggestions: list[str]) -> str:
    """`` Did you mean 'a' or 'b'?`` (with a leading space), or "" when there is nothing close."""
    if not suggestions:
        return ""
    quoted = [repr(s) for s in suggestions]
    words = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f" Did you mean {words}?"


class PrescientError(Exception):
    """Base class of every prescient error."""


class UnknownCheck(PrescientError, ValueError):
    """A check name (or function) that no code registered. ``suggestions``: the registered
    names closest to it."""

    def __init__(self, name: object, known: Iterable[str] = ()) -> None:
        self.name = name
        self.suggestions = closest(name, known)
        hint = did_you_mean(self.suggestions) or (
            f" Register it with @prescient.check({name!r}, ...) "
            "in code that is imported at startup (e.g. <app>/prescient_checks.py)."
        )
        super().__init__(f"Unknown check {name!r}.{hint}")


class WrongKind(PrescientError, ValueError):
    """A registered name given to the verb of another kind: an expectation's name to
    ``schedule()`` (its jobs start with ``expect()``), a check's to ``expect()``."""


class UnknownWorkflow(PrescientError, LookupError):
    """A workflow name that no job, schedule or earlier pause uses (a typo, most often).
    ``suggestions``: the known names closest to it."""

    def __init__(self, name: object, known: Iterable[str] = ()) -> None:
        self.name = name
        self.suggestions = closest(name, known)
        hint = did_you_mean(self.suggestions) or " No job or schedule uses it."
        super().__init__(
            f"Unknown workflow {name!r}.{hint} To make a new workflow on purpose, pass "
            "create_workflow=True (--create on the command line)."
        )


class AlreadyRegistered(PrescientError):
    """Two different functions registered under one check name."""


class InvalidEntity(PrescientError, ValueError):
    """The entity given to schedule() is not a saved instance of the check's model."""


class InvalidTime(PrescientError, ValueError):
    """A due time that cannot be used: naive, unparsable, both at and delay, or past the horizon."""


class InvalidTransition(PrescientError):
    """An event that the transition table does not allow in the job's current state."""

    def __init__(self, job: Any, event: str, detail: str = "") -> None:
        self.job_id = getattr(job, "pk", job)
        state = getattr(job, "state", None)
        # str() turns a State/Event member into its value: the message says 'pause', not Event.PAUSE.
        self.state = None if state is None else str(state)
        self.event = str(event)
        message = f"Job {self.job_id} is {self.state}: {self.event!r} is not allowed"
        if detail:
            message = f"{message} ({detail})"
        super().__init__(message)


class JobNotFound(PrescientError, LookupError):
    """No live job with that id (it may have finished: see the history)."""

    def __init__(self, job_id: object) -> None:
        self.job_id = job_id
        super().__init__(f"No live job with id {job_id!r}; it may have finished (see JobHistory)")


class HistoryNotFound(PrescientError, LookupError):
    """No history row with that id (never written, or pruned)."""

    def __init__(self, row_id: object) -> None:
        self.row_id = row_id
        super().__init__(f"No finished job (history row) with id {row_id!r}; it may have been pruned")


class RerunRefused(PrescientError):
    """A finished job cannot be run again (:func:`prescient.rerun`): ``reason`` says why.
    Nothing was written."""

    def __init__(self, row_id: object, reason: str) -> None:
        self.row_id, self.reason = row_id, reason
        super().__init__(f"Finished job {row_id} cannot be run again: {reason}")


class UnknownParent(PrescientError, LookupError):
    """A job given in ``after=`` that is neither live nor in the history."""

    def __init__(self, job_ids: list[int]) -> None:
        self.job_ids = job_ids
        super().__init__(f"No job with id {', '.join(map(str, job_ids))}, live or in the history, to wait on")


class InvalidDependency(PrescientError, ValueError):
    """An ``after=`` or ``on_parent_failure=`` that cannot be used."""


class ImmutableField(PrescientError, ValueError):
    """A change to what a job keeps for life: its ``first_check_at`` (written when it is
    scheduled) or its workflow (``schedule(..., replace=True)`` moves the due time only).
    ``field`` names it, ``job_id`` the job. Nothing is written."""

    def __init__(self, field: str, job_id: object, message: str) -> None:
        self.field, self.job_id = field, job_id
        super().__init__(message)


class RunFailed(PrescientError):
    """A run that failed outside its own code: its process died or its worker was lost.

    Named in the errors of a django.tasks result when no exception of the task's own is known.
    """


class ChildDied(RunFailed):
    """A run whose process ended under it (``os._exit``, a segfault, the memory cap, a kill from
    outside): charged as a failed run; :data:`MAX_CRASHES <prescient.conf.DEFAULTS>` of them in a
    row bury the job."""


class Release(PrescientError):
    """Raised by a job's own code (a check, a task, an expectation's handler) to hand its claim
    back uncharged, as returning :data:`prescient.RELEASE` does (Metafora's Release): no run,
    failure or check is counted, and the job is due again at the next slot (a paused job stays
    paused). ``reason`` is logged.

        if carrier.is_down():
            raise prescient.Release("the carrier's API is down")
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason)


class Interrupted(BaseException):
    """Raised inside a run by an operator's signal (Ctrl-C, SIGTERM) to a tick: the run is handed
    back uncharged and the process stops. Never raised by a job's own code (a job that raises
    KeyboardInterrupt or SystemExit has a failed run, as for any exception)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signum)


class CheckTimeout(BaseException):
    """Raised inside a check that ran past its timeout.

    A BaseException so that a check's own ``except Exception`` cannot swallow it.
    """


class InvalidSchedule(PrescientError, ValueError):
    """A recurring schedule that cannot be used: a bad cron expression, time zone, interval or
    target. Nothing is written."""
