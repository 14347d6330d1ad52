"""Moves of one locked job by an event of the transition table, outside a run's settle.

Each function here takes a job the caller holds locked and an :class:`~prescient.states.Event`,
asks :func:`prescient.states.target` where the event leads (InvalidTransition if the table
refuses it) and writes that: no module outside this package calls ``states.target`` (the
settle of a run, :mod:`.settle`, is the other caller; ``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import connection

from prescient import states
from prescient.exceptions import InvalidTransition
from prescient.models import FutureJob
from prescient.states import END, Event, State

from .claims import take_back
from .ending import end_job

logger = logging.getLogger("prescient.engine")

#: The FutureJob fields a move may change.
_MOVE_FIELDS = ["state", "last_state", "next_check_at"]


def preview(job: FutureJob, event: str) -> str:
    """Where ``event`` would take ``job`` (a state, or ``states.END``), writing nothing;
    InvalidTransition if the table refuses it. For dry runs and for checks before a write."""
    return states.target(job, event)


def move(job: FutureJob, event: str, *, due: datetime | None = None, refuse_in_flight: bool = False) -> bool:
    """Move a locked job by ``event`` (pause, release, run_now, sleep) as the table says, with
    ``due`` as its next check if given; returns whether anything changed.

    - A ``reserved`` job (claimed, its code not started) is taken back from its claim.
    - A ``waiting`` job stays waiting: a pause of its own is kept (``last_state`` ``paused``)
      for when it is unblocked, a release drops it, a sleep sets its due time.
    - A job whose run is in flight: a sleep is asked of the run (due once the run returns), a
      pause marks it paused and asks the run to stop, a release (or run_now of a paused job)
      returns it to ``running``; anything that would set its due time now is refused, and
      with ``refuse_in_flight`` any move at all (``schedule(replace=True)``).
    - A job paused remembers the state it left; any other target drops what was remembered.
    """
    to = states.target(job, event)
    if refuse_in_flight and job.in_flight:
        raise InvalidTransition(job, event, "its run is in flight")
    if to == END:
        raise InvalidTransition(job, event, "it ends the job: use store.end")
    if job.state == State.RESERVED and job.in_flight and to != job.state:  # taken back: its code never runs
        if due is not None:
            job.next_check_at = due
        take_back(job, to)
        return True
    if job.state == State.WAITING:
        keeps: dict[str, str] = {Event.PAUSE: State.PAUSED, Event.RELEASE: ""}
        kept = keeps.get(event, job.last_state)
        changed = kept != job.last_state or (due is not None and due != job.next_check_at)
        job.last_state = kept
        if due is not None:
            job.next_check_at = due
        if changed:
            job.save(update_fields=_MOVE_FIELDS)
        return changed
    if job.in_flight and due is not None and to != State.RUNNING:
        if event != Event.SLEEP:
            raise InvalidTransition(job, event, "its run is in flight")
        _request_sleep(job, due)
        logger.info("job id=%s sleep until %s requested while its run is in flight", job.pk, due.isoformat())
        return True
    if to == job.state and due is None:
        return False  # idempotent: paused again, released while not paused
    if to == State.PAUSED:
        job.last_state = job.last_state if job.state == State.PAUSED else job.state
    else:
        job.last_state = ""
    job.state = to
    if due is not None and to != State.RUNNING:  # a paused job released into its run keeps its time
        job.next_check_at = due
    job.save(update_fields=_MOVE_FIELDS)
    if job.in_flight and to == State.PAUSED:
        notify_stop()  # its run is asked to stop (see job.should_stop())
    return True


def end(job: FutureJob, event: str, outcome: str, reason: str, now: datetime) -> str:
    """End a locked job by ``event`` (kill, cancel) with ``outcome`` and ``reason``: now, or,
    if its run is in flight (started), once the run returns. Returns ``"ended"`` or
    ``"requested"``."""
    states.target(job, event)
    if job.in_flight and job.state != State.RESERVED:  # a reserved job's code never runs: ended now
        job.end_requested, job.end_reason = outcome, reason
        # With the payload as the caller left it (an expectation met at a save: its met_at,
        # which the settle keeps); the run's own changes are in its worker until it settles.
        job.save(update_fields=["end_requested", "end_reason", "payload"])
        notify_stop()
        logger.info("job id=%s %s requested while its run is in flight", job.pk, outcome)
        return "requested"
    job.end_reason = reason
    end_job(job, outcome, now)
    return "ended"


def note_in_run(job: FutureJob, payload: object) -> bool:
    """Write ``payload`` on ``job`` while its run is in flight, if the row is still this run's:
    claimed under the same token, with no end requested (a kill, a cancel, or an expectation met
    by a save). Returns whether it was; False tells the run to go no further. The run's result,
    written when it settles, replaces the payload again."""
    still_ours = FutureJob.objects.filter(pk=job.pk, reserved_by=job.reserved_by, end_requested="")
    return bool(job.reserved_by) and still_ours.update(payload=payload) == 1


def _request_sleep(job: FutureJob, until: datetime) -> None:
    """Ask a locked job whose run is in flight to be due at ``until`` once the run returns (its
    result is then discarded)."""
    job.sleep_until = until
    job.save(update_fields=["sleep_until"])
    notify_stop()


#: The LISTEN/NOTIFY channel that tells workers a run in flight was asked to stop (PostgreSQL).
STOP_CHANNEL = "prescient_stop"


def notify_stop() -> None:
    """Tell listening workers that some run in flight was paused, killed or slept: delivered
    when the caller's transaction commits (PostgreSQL; elsewhere workers poll)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [STOP_CHANNEL])
