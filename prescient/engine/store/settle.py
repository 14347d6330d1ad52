"""Settling: a batch's results written back through the transition table, guarded by its token."""

from __future__ import annotations

import copy
import logging
from datetime import datetime
from typing import Any

from django.db import DataError, IntegrityError, ProgrammingError, connection, transaction
from django.db.models import F

from prescient import states
from prescient.cleaning import clean_text
from prescient.exceptions import InvalidTransition
from prescient.models import FutureJob, JobHistory
from prescient.states import END, Event, Outcome, State

from .. import bulk
from ..decisions import DISCARDED, HANDED_BACK, SUMMARY_KEY, Decision, TickSummary, record_error, type_path
from . import links
from .ending import _insert_history, end_jobs
from .tallies import RunTally
from .wake import notify

logger = logging.getLogger("prescient.engine")


_SETTLE_FIELDS = [
    "state", "last_state", "next_check_at", "check_count", "run_count", "failure_count",
    "total_run_seconds", "last_error", "recent_errors", "reserved_at", "reserved_by", "run_started_at", "payload",
    "sleep_until",
]


def settle(decisions: list[Decision], token: str, now: datetime, summary: TickSummary) -> None:
    """Write a batch's results back in one transaction, each through the transition table.

    Only rows still reserved under ``token`` are touched: a job buried meanwhile keeps its new
    state and the result is discarded. A job killed or cancelled during its run ends that way.
    """
    if not decisions:
        return
    counts = summary.counts.copy()
    try:
        _settle_batch(decisions, token, now, summary)
    except _REFUSED:
        # Some result the database will not take (a driver or a constraint refusing a value):
        # write the batch row by row, and fail only the rows it refuses.
        summary.counts = counts
        for decision in decisions:
            counts = summary.counts.copy()
            try:
                _settle_batch([decision], token, now, summary)
            except _REFUSED as exc:
                summary.counts = counts
                _settle_refused(decision, token, now, summary, exc)
    if any(decision.job.limit_key for decision in decisions):
        # Runs under a limit ended: their keys have room for jobs held back, maybe in an idle
        # worker elsewhere (on PostgreSQL; others poll).
        notify()


#: Errors of a write that one row's data can cause; lost connections are left to the caller.
_REFUSED = (DataError, IntegrityError, ProgrammingError, ValueError)


class _Linked(Exception):
    """Jobs of the batch were given dependants during their runs (their ``has_dependants`` as
    claimed is stale): the batch is settled again, their children's workflows locked first."""

    def __init__(self, pks: set[int]) -> None:
        super().__init__(pks)
        self.pks = pks


def _settle_batch(decisions: list[Decision], token: str, now: datetime, summary: TickSummary) -> None:
    counts = summary.counts.copy()
    while True:
        try:
            _settle_once(decisions, token, now, summary)
            return
        except _Linked as linked:  # rare: a child was scheduled after= a job of this batch while it ran
            summary.counts = counts.copy()
            for decision in decisions:
                if decision.job.pk in linked.pks:
                    decision.job.has_dependants = True


def _settle_once(decisions: list[Decision], token: str, now: datetime, summary: TickSummary) -> None:
    tally = RunTally(now)
    with transaction.atomic(), tally.collecting():
        if connection.vendor == "postgresql":
            # Before any job row: the workflows of the jobs that wait on this batch (see links).
            # Only jobs with dependants can have any; on SQLite writers are serialised.
            parents = [d.job.pk for d in decisions if d.job.has_dependants]
            if parents:
                links.lock_workflows_of_children(parents)
            rest = _settle_guarded(decisions, token, now, summary, tally)
        else:
            rest = decisions
        if rest:
            _settle_locked(rest, token, now, summary, tally)
        tally.write()  # runs and endings, after every job row: the tallies' locks are the last taken


def _settle_refused(decision: Decision, token: str, now: datetime, summary: TickSummary, exc: Exception) -> None:
    """The database refused to store ``decision``: its job ends ``failed``, with the database's
    message as its error, from its row as it was before the run."""
    job = FutureJob.objects.filter(pk=decision.job.pk, reserved_by=token).first()
    if job is None:
        summary.counts[DISCARDED] += 1
        return
    error = clean_text(f"{type(exc).__name__}: the database refused this run's result: {exc}")
    logger.error("job id=%s %s", job.pk, error)
    record_error(job, error, now)
    job.failure_count += 1
    refused = Decision(job=job, event=Event.FINISH, outcome=Outcome.FAILED, error=error, seconds=decision.seconds,
                       ran=decision.ran, exception_path=type_path(exc))
    try:
        _settle_batch([refused], token, now, summary)
    except _REFUSED:  # pragma: no cover - the row as it was is storable; left to the rescuer
        logger.exception("job id=%s: even its failure could not be written", job.pk)


def _count_run(job: FutureJob, decision: Decision) -> None:
    """Carry what the run changed (``decision.job``) over to ``job``."""
    ran = decision.job
    job.failure_count = ran.failure_count
    job.last_error = ran.last_error
    job.recent_errors = ran.recent_errors
    job.payload = ran.payload  # a kind's own data (a task's attempts and return value)
    if decision.ran:
        job.run_count += 1
        job.total_run_seconds += decision.seconds


def _settle_guarded(
    decisions: list[Decision], token: str, now: datetime, summary: TickSummary, tally: RunTally
) -> list[Decision]:
    """Settle the common case without reading the rows first; return what it could not settle.

    A job whose run ends, is re-scheduled or retried, still ``running`` under ``token`` with
    no end requested (as it was claimed) moves as the transition table says for ``running``:
    one ``DELETE … RETURNING`` (its history row is made from the row deleted) and one
    ``UPDATE`` for the rest, each guarded by those same conditions. A job the guard turns away
    (paused, killed or buried meanwhile) is settled by :func:`_settle_locked`, and so is a job
    that ends with dependants (its waiters are moved on there), or that was given some since.
    """
    finishing: dict[int, Decision] = {}
    moving: list[tuple[FutureJob, Decision]] = []
    rest: list[Decision] = []
    for decision in decisions:
        job = decision.job
        fast = (
            decision.event in (Event.FINISH, Event.RESCHEDULE, Event.RETRY)
            and job.state == State.RUNNING and job.reserved_by == token and not job.end_requested
            and job.sleep_until is None
        )
        to = None
        if fast:
            try:
                to = states.target(job, decision.event)
            except InvalidTransition:
                pass  # _settle_locked reports it
        if to == END and not job.has_dependants:  # a job with dependants ends through _settle_locked
            finishing[job.pk] = decision
        elif to == State.SCHEDULED:
            moved = copy.copy(job)
            _count_run(moved, decision)
            moved.next_check_at = decision.next_check_at  # type: ignore[assignment]
            if decision.event == Event.RESCHEDULE:
                moved.check_count += 1
            moved.state, moved.last_state = State.SCHEDULED, ""
            moved.reserved_by, moved.reserved_at, moved.run_started_at = "", None, None
            moving.append((moved, decision))
        else:
            rest.append(decision)
    guard = {"reserved_by": token, "state": State.RUNNING.value, "end_requested": "", "sleep_until": None}
    if finishing:
        history: list[JobHistory] = []
        # Only rows that still have no dependants: one given some during its run is turned away.
        for job in bulk.delete_returning(FutureJob, list(finishing), {**guard, "has_dependants": False}):
            decision = finishing.pop(job.pk)
            _count_run(job, decision)
            history.append(JobHistory.from_job(job, decision.outcome, now, **_why(decision)))
            summary.counts[decision.outcome] += 1
            _settled(job, decision.outcome, decision, tally)
        _insert_history(history)  # no waiters to release: these jobs have no dependants
        rest.extend(finishing.values())
    if moving:
        hit = set(bulk.update_rows(FutureJob, [job for job, _ in moving], _SETTLE_FIELDS, guard=guard))
        for job, decision in moving:
            if job.pk not in hit:
                rest.append(decision)
                continue
            summary.counts[SUMMARY_KEY[decision.event]] += 1
            _settled(job, SUMMARY_KEY[decision.event], decision, tally)
    return rest


def _settle_locked(
    decisions: list[Decision], token: str, now: datetime, summary: TickSummary, tally: RunTally
) -> None:
    """Settle each decision against its row as it is now, read and locked (call in a transaction)."""
    current = _lock_reserved([d.job.pk for d in decisions], token)
    if connection.vendor == "postgresql":
        claimed = {d.job.pk: d.job.has_dependants for d in decisions}
        linked = {pk for pk, job in current.items() if job.has_dependants and not claimed[pk]}
        if linked:  # their children's workflows were not locked before the job rows: start again
            raise _Linked(linked)
    ended: list[tuple[FutureJob, str]] = []
    why: dict[int, dict[str, Any]] = {}
    updated: list[FutureJob] = []
    for decision in decisions:
        job = current.get(decision.job.pk)
        if job is None:
            if decision.event == Event.HAND_BACK and not decision.ran:
                summary.counts[HANDED_BACK] += 1  # taken back before it started: already written
                continue
            summary.counts[DISCARDED] += 1
            tally.run(decision.job, DISCARDED, decision)
            logger.warning("job id=%s lost its reservation during the run; result discarded", decision.job.pk)
            continue
        met_at = job.payload.get("met_at") if isinstance(job.payload, dict) else None
        _count_run(job, decision)
        event, outcome, due = decision.event, decision.outcome, decision.next_check_at
        if job.end_requested:
            event, outcome = Event.FINISH, job.end_requested
            if met_at and outcome == Outcome.MET and isinstance(job.payload, dict):
                job.payload = {**job.payload, "met_at": met_at}  # met by a save during the run
        elif job.sleep_until is not None:  # slept during the run: its result is discarded
            event, due = Event.SLEEP, job.sleep_until
        try:
            to = states.target(job, event)
        except InvalidTransition as exc:  # a row in a state no run should meet: leave it be
            summary.counts[DISCARDED] += 1
            logger.error("job id=%s result discarded: %s", job.pk, exc)
            continue
        if to == END:
            ended.append((job, outcome))
            if outcome == decision.outcome:  # not a kill or cancel that came during the run
                why[job.pk] = _why(decision)
            summary.counts[outcome] += 1
            _settled(job, outcome, decision, tally)
            continue
        if due is not None and event != Event.FINISH:
            job.next_check_at = due  # re-checked, retried, slept, or released to a later slot
        if event == Event.RESCHEDULE:
            job.check_count += 1
        summary.counts[SUMMARY_KEY[event]] += 1
        job.last_state = State.SCHEDULED if to == State.PAUSED else ""
        job.state = to
        job.reserved_by, job.reserved_at, job.run_started_at = "", None, None
        job.sleep_until = None
        updated.append(job)
        _settled(job, SUMMARY_KEY[event], decision, tally)
    if ended:
        end_jobs(ended, now, why)
    if updated:
        bulk.update_rows(FutureJob, updated, _SETTLE_FIELDS)


def _lock_reserved(pks: list[int], token: str) -> dict[int, FutureJob]:
    """The jobs among ``pks`` still reserved under ``token``, locked until the transaction ends."""
    rows = FutureJob.objects.select_for_update().filter(bulk.AnyOf(F("pk"), pks), reserved_by=token)
    return {job.pk: job for job in rows.order_by()}


def _why(decision: Decision) -> dict[str, Any]:
    """What the history row of a job that ``decision`` ends keeps of why (its ``reason``; for a
    horizon, the time asked for; for a failure, its exception's class and traceback)."""
    why: dict[str, Any] = {"reason": decision.reason} if decision.reason else {}
    if decision.asked_check_at is not None:
        why["asked_check_at"] = decision.asked_check_at
    if decision.exception_path:
        why["exception_class_path"], why["traceback"] = decision.exception_path, decision.traceback
    return why


def _settled(job: FutureJob, what: str, decision: Decision, tally: RunTally) -> None:
    """Count and log a settled run of ``job`` that led to ``what``."""
    tally.run(job, what, decision)
    logger.info(
        "%s=%s entity=%s:%s outcome=%s duration=%.3fs%s%s",
        job.kind or "check", job.job_exec, job.entity_name, job.entity_key, what, decision.seconds,
        f" error={decision.error}" if decision.error else "", f" reason={decision.reason}" if decision.reason else "",
    )
