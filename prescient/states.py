"""The job state machine: states, outcomes, events and the one table of allowed moves.

Every change of a job's state goes through :func:`target`; anything absent from :data:`MOVES`
is refused with :class:`~prescient.exceptions.InvalidTransition`. ``docs/states.md`` is
generated from this table (``python -m prescient.states``).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from .exceptions import InvalidTransition


class State(models.TextChoices):
    SCHEDULED = "scheduled", _("Scheduled")  # waiting for its slot
    RESERVED = "reserved", _("Reserved")  # claimed by a tick or worker; its code has not started
    RUNNING = "running", _("Running")  # its code has started (or is about to) and will finish
    PAUSED = "paused", _("Paused")  # remembers its last state
    BURIED = "buried", _("Buried")  # its worker vanished; a person decides
    WAITING = "waiting", _("Waiting")  # some job it runs after has not ended yet


class Outcome(models.TextChoices):
    COMPLETED = "completed", _("Completed")  # the check returned None
    MAX_CHECKS = "max_checks", _("Max checks")  # asked for one re-check too many
    HORIZON = "horizon", _("Horizon")  # asked for a time in the past or too far ahead
    FAILED = "failed", _("Failed")  # failed more than its retries allow
    ENTITY_MISSING = "entity_missing", _("Entity missing")  # its instance was deleted
    CANCELLED = "cancelled", _("Cancelled")  # prescient.cancel()
    KILLED = "killed", _("Killed")  # killed by a person, with a reason
    MET = "met", _("Met")  # an expectation found met (at a save, or at a rung)
    MISSED = "missed", _("Missed")  # an expectation past the last rung of its ladder, unmet


class Event(models.TextChoices):
    CLAIM = "claim", _("claim")  # a tick or worker takes a due job
    START = "start", _("start")  # the statement that starts its run: its code runs next
    RESCHEDULE = "reschedule", _("reschedule")  # the check asked to be called again
    RETRY = "retry", _("retry")  # a failed run will be retried
    FINISH = "finish", _("finish")  # the run ended the job (any outcome)
    HAND_BACK = "hand_back", _("hand back")  # a claim returned unrun, or a run that returned RELEASE
    BURY = "bury", _("bury")  # a tick's reservation went stale: parked for a person
    RECLAIM = "reclaim", _("reclaim")  # a worker stopped heart-beating: its claim is run again
    PAUSE = "pause", _("pause")
    RELEASE = "release", _("release")
    RUN_NOW = "run_now", _("run now")  # due at once, without waiting for a slot
    SLEEP = "sleep", _("sleep")  # due at a given time
    KILL = "kill", _("kill")  # a person ends the job, with a reason
    CANCEL = "cancel", _("cancel")  # host code ends the job (or a parent that did not complete)
    UNBLOCK = "unblock", _("unblock")  # every job it waits on has ended: free to run


#: Pseudo-target: the job leaves the live table and gets its history row.
END = "(end)"
#: Pseudo-target: back to the state remembered when the job was paused.
LAST = "(last state)"

S, E = State, Event

MOVES: dict[tuple[str, str], str] = {
    # (state, event): target; anything absent is refused.
    (S.SCHEDULED, E.CLAIM): S.RESERVED,
    (S.SCHEDULED, E.PAUSE): S.PAUSED,
    (S.SCHEDULED, E.RELEASE): S.SCHEDULED,  # idempotent: nothing to release
    (S.SCHEDULED, E.RUN_NOW): S.SCHEDULED,
    (S.SCHEDULED, E.SLEEP): S.SCHEDULED,
    (S.SCHEDULED, E.KILL): END,
    (S.SCHEDULED, E.CANCEL): END,
    # Reserved: claimed, its code not started. Anything a person asks applies at once, and a
    # claim taken away (paused, slept) is handed back untouched: no check counted, nothing charged.
    (S.RESERVED, E.START): S.RUNNING,
    (S.RESERVED, E.HAND_BACK): S.SCHEDULED,
    (S.RESERVED, E.BURY): S.SCHEDULED,  # a stale claim never started is handed back, not parked
    (S.RESERVED, E.RECLAIM): S.SCHEDULED,  # likewise: nothing charged
    (S.RESERVED, E.PAUSE): S.PAUSED,  # handed back at once, remembering ``scheduled``
    (S.RESERVED, E.RELEASE): S.RESERVED,  # idempotent
    (S.RESERVED, E.SLEEP): S.SCHEDULED,  # handed back at once, due when asked
    (S.RESERVED, E.KILL): END,  # at once: its code never runs
    (S.RESERVED, E.CANCEL): END,
    (S.RUNNING, E.RESCHEDULE): S.SCHEDULED,
    (S.RUNNING, E.RETRY): S.SCHEDULED,
    (S.RUNNING, E.FINISH): END,
    (S.RUNNING, E.HAND_BACK): S.SCHEDULED,
    (S.RUNNING, E.BURY): S.BURIED,
    (S.RUNNING, E.RECLAIM): S.SCHEDULED,
    (S.RUNNING, E.PAUSE): S.PAUSED,  # the run goes on; the job remembers ``running``
    (S.RUNNING, E.RELEASE): S.RUNNING,  # idempotent
    (S.RUNNING, E.SLEEP): S.SCHEDULED,  # deferred: the run returns, its result is discarded
    (S.RUNNING, E.KILL): END,  # deferred: the run returns, its result is discarded
    (S.RUNNING, E.CANCEL): END,  # deferred likewise
    (S.PAUSED, E.RESCHEDULE): S.PAUSED,  # stays paused, remembers ``scheduled``
    (S.PAUSED, E.RETRY): S.PAUSED,
    (S.PAUSED, E.FINISH): END,
    (S.PAUSED, E.HAND_BACK): S.PAUSED,
    (S.PAUSED, E.BURY): S.BURIED,
    (S.PAUSED, E.RECLAIM): S.PAUSED,
    (S.PAUSED, E.PAUSE): S.PAUSED,  # idempotent
    (S.PAUSED, E.RELEASE): LAST,
    (S.PAUSED, E.RUN_NOW): LAST,  # released and due now (Metafora's Run); a run in flight goes on
    (S.PAUSED, E.SLEEP): S.PAUSED,  # new due time, still paused (deferred while a run is in flight)
    (S.PAUSED, E.KILL): END,
    (S.PAUSED, E.CANCEL): END,
    (S.BURIED, E.RUN_NOW): S.SCHEDULED,
    (S.BURIED, E.SLEEP): S.SCHEDULED,
    (S.BURIED, E.KILL): END,
    (S.BURIED, E.CANCEL): END,
    # A waiting job is never claimed; into a paused workflow it is unblocked paused, remembering
    # ``scheduled``, as a job scheduled into a paused workflow starts paused.
    (S.WAITING, E.UNBLOCK): S.SCHEDULED,
    # A waiting job stays waiting; a pause of the job itself is kept (last_state ``paused``) and
    # it is unblocked paused; its release drops that. A paused workflow leaves waiting jobs be.
    (S.WAITING, E.PAUSE): S.WAITING,
    (S.WAITING, E.RELEASE): S.WAITING,
    (S.WAITING, E.SLEEP): S.WAITING,  # its own due time, for when it is unblocked
    (S.WAITING, E.KILL): END,
    (S.WAITING, E.CANCEL): END,
}

#: Events that only the claimant of a run in flight may send.
RUN_EVENTS = frozenset({E.START, E.RESCHEDULE, E.RETRY, E.FINISH, E.HAND_BACK, E.BURY, E.RECLAIM})


def target(job: Any, event: str) -> str:
    """The state ``job`` moves to on ``event`` (or END / LAST); InvalidTransition if refused.

    ``job`` needs ``state``, ``last_state`` and ``reserved_by`` (a run is in flight when set).
    """
    to = MOVES.get((job.state, event))
    if to is None:
        raise InvalidTransition(job, event)
    in_flight = bool(job.reserved_by)
    if event in RUN_EVENTS and not in_flight:
        raise InvalidTransition(job, event, "no run in flight")
    if to == LAST:
        return job.last_state or S.SCHEDULED
    return to


def states_with(event: str) -> list[str]:
    """The states in which ``event`` is allowed at all."""
    return [state for (state, ev) in MOVES if ev == event]


def states_from(event: str, to: str) -> list[str]:
    """The states in which ``event`` leads to ``to``: used to build bulk updates from the table."""
    return [state for (state, ev), target_ in MOVES.items() if ev == event and target_ == to]


def render_markdown() -> str:
    """The transition table as Markdown (for docs/states.md)."""
    events = list(Event)
    lines = [
        "| state \\ event | " + " | ".join(f"`{e.value}`" for e in events) + " |",
        "|---|" + "---|" * len(events),
    ]
    for state in State:
        cells = []
        for event in events:
            to = MOVES.get((state, event))
            cells.append("·" if to is None else (f"**{to}**" if to in (END, LAST) else str(to)))
        lines.append(f"| `{state.value}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(render_markdown())
