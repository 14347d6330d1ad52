"""The sweep: claim due jobs, run their checks, settle the outcomes.

*claim* marks a batch of due rows ``running`` in one statement (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so concurrent ticks and workers take disjoint batches); *run* loads the entities in
bulk and calls each check under its timeout; *settle* writes the results back in one
transaction per batch, through the transition table, guarded by the batch's reservation token.
A tick is sweeps until nothing due is left.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connection, models, transaction
from django.utils import timezone

from . import runner, slots, states
from .conf import setting, stale_after_seconds
from .errors import get_handler
from .exceptions import InvalidTransition, PrescientError
from .models import FutureJob, JobHistory
from .registry import Check, get_check
from .states import END, Event, Outcome, State

logger = logging.getLogger(__name__)

#: Summary keys besides the outcomes.
RESCHEDULED, RETRIED, DISCARDED, BURIED = "rescheduled", "retried", "discarded", "buried"
HANDED_BACK = "handed_back"
_SUMMARY_KEY = {Event.RESCHEDULE: RESCHEDULED, Event.RETRY: RETRIED, Event.HAND_BACK: HANDED_BACK}


@dataclass
class Decision:
    """What a run leads to: an event of the transition table and its details."""

    job: FutureJob
    event: str
    outcome: str = ""
    next_check_at: datetime | None = None
    error: str = ""
    seconds: float = 0.0
    ran: bool = False


@dataclass
class TickSummary:
    """Counts per outcome (and ``rescheduled``, ``retried``, ``buried``, ``discarded``)."""

    counts: Counter[str] = field(default_factory=Counter)

    @property
    def processed(self) -> int:
        return sum(v for k, v in self.counts.items() if k not in (BURIED, HANDED_BACK))

    def line(self) -> str:
        order = [o.value for o in Outcome] + [RESCHEDULED, RETRIED, BURIED, DISCARDED]
        if self.counts.get(HANDED_BACK):
            order.append(HANDED_BACK)
        parts = [f"{key}={self.counts.get(key, 0)}" for key in order]
        return f"prescient tick: processed={self.processed} " + " ".join(parts)


def new_token(kind: str = "tick") -> str:
    """A reservation token unique to one claim."""
    return f"{kind}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


# --- claim -----------------------------------------------------------------------------------


def claim(now: datetime, limit: int, token: str) -> list[FutureJob]:
    """Mark up to ``limit`` due jobs ``running`` under ``token`` and return them, oldest first."""
    due = FutureJob.objects.due(now).order_by("next_check_at", "id")
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True)
    with transaction.atomic():
        # The ids are picked first, not in a sub-select of the UPDATE: PostgreSQL may re-run
        # such a sub-select for each row it updates, each run skipping the rows already
        # changed, and so claim far more than ``limit`` jobs.
        pks = list(due.values_list("pk", flat=True)[:limit])
        if not pks:
            return []
        claimed = FutureJob.objects.filter(pk__in=pks, state=State.SCHEDULED).update(
            state=State.RUNNING, reserved_at=now, reserved_by=token
        )
    if not claimed:
        return []
    return list(FutureJob.objects.filter(reserved_by=token).order_by("next_check_at", "id"))


def _stale(cutoff: datetime) -> models.QuerySet[FutureJob]:
    return (
        FutureJob.objects.in_flight()
        .filter(reserved_at__lt=cutoff, state__in=states.states_from(Event.BURY, State.BURIED))
        .order_by()
    )


def survey(now: datetime) -> tuple[bool, bool]:
    """``(anything due, any stale reservation)`` in one query, each answered by its own index.

    This is all an idle tick costs, however many jobs are pending.
    """
    cutoff = now - timedelta(seconds=stale_after_seconds())
    due_sql, due_params = FutureJob.objects.due(now).order_by().values("pk")[:1].query.sql_with_params()
    stale_sql, stale_params = _stale(cutoff).values("pk")[:1].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS({due_sql}), EXISTS({stale_sql})", [*due_params, *stale_params])
        row = cursor.fetchone()
    return bool(row[0]), bool(row[1])


#: Reservations made by prescient_worker start with this; a worker renews its leases while it
#: lives, so a stale one means the worker is gone and its claim can simply run again.
WORKER_TOKEN_PREFIX = "worker:"


def _reclaim(job: FutureJob, now: datetime) -> None:
    """A dead worker's claim: counted as a failed run and due again at once (or failed)."""
    job.failure_count += 1
    check = None
    try:
        check = get_check(job.job_exec)
    except PrescientError:
        pass
    retries = check.retries_allowed if check is not None else int(setting("MAX_RETRIES"))
    if job.failure_count > retries:
        states.target(job, Event.FINISH)
        JobHistory.from_job(job, Outcome.FAILED, now).save(force_insert=True)
        FutureJob.objects.filter(pk=job.pk).delete()
        logger.warning("job id=%s failed: its worker was lost too often", job.pk)
        return
    to = states.target(job, Event.RECLAIM)
    job.last_state = State.SCHEDULED if to == State.PAUSED else ""
    job.state = to
    job.reserved_by, job.reserved_at = "", None
    job.save()
    logger.warning("job id=%s reclaimed from a lost worker; due again", job.pk)


def bury_stale(now: datetime) -> int:
    """Deal with reservations older than the stale period; returns how many jobs it moved.

    A stale reservation of a worker (which renews its leases while alive) is reclaimed: the
    job counts a failed run and is due again at once. Any other (a tick that died) is moved to
    ``buried`` for a person to decide.

    A job killed or cancelled while its run was in flight is not buried but ends as asked (its
    run will never return to end it), with the "worker lost" error in its history row.
    """
    cutoff = now - timedelta(seconds=stale_after_seconds())
    stale = _stale(cutoff)
    buried = 0
    for pk in list(stale.values_list("pk", flat=True)):
        with transaction.atomic():
            job = FutureJob.objects.select_for_update().filter(pk=pk).first()
            if job is None or not job.in_flight or job.reserved_at is None or job.reserved_at >= cutoff:
                continue
            error = f"worker lost: reservation {job.reserved_by} from {job.reserved_at.isoformat()} went stale"
            _record_error(job, error, now)
            if job.end_requested:
                states.target(job, Event.FINISH)
                JobHistory.from_job(job, job.end_requested, now).save(force_insert=True)
                FutureJob.objects.filter(pk=job.pk).delete()
                logger.warning("job id=%s ended %s: %s", job.pk, job.end_requested, error)
                continue
            if job.reserved_by.startswith(WORKER_TOKEN_PREFIX):
                _reclaim(job, now)
                buried += 1
                continue
            job.state = states.target(job, Event.BURY)
            job.last_state = ""
            job.reserved_by = ""
            job.reserved_at = None
            job.save()
            buried += 1
            logger.warning("job id=%s buried: %s", job.pk, error)
    return buried


# --- run -------------------------------------------------------------------------------------


def load_entities(jobs: Iterable[FutureJob]) -> dict[tuple[str, str], models.Model]:
    """The entities of ``jobs``, fetched with one query per model. Missing ones are absent."""
    keys: dict[str, set[str]] = defaultdict(set)
    for job in jobs:
        keys[job.entity_name].add(job.entity_key)
    found: dict[tuple[str, str], models.Model] = {}
    for name, wanted in keys.items():
        try:
            model = apps.get_model(name)
        except (LookupError, ValueError):
            continue  # reported per job by run_one
        manager = model._default_manager
        try:
            objects = manager.in_bulk(list(wanted))
        except (ValueError, TypeError, ValidationError):
            objects = {}
            for key in wanted:  # one bad key must not hide the good ones
                try:
                    obj = manager.filter(pk=key).first()
                except (ValueError, TypeError, ValidationError):
                    obj = None
                if obj is not None:
                    objects[obj.pk] = obj
        for pk, obj in objects.items():
            found[(name, str(pk))] = obj
    return found


def decide(job: FutureJob, check: Check, result: runner.RunResult, now: datetime) -> Decision:
    """Turn what a check returned into the next event for its job."""
    decision = Decision(job=job, event=Event.FINISH, seconds=result.seconds, ran=True)
    value = result.value
    if result.failed:
        return _failure(decision, check, result.error, now)
    if value is None:
        decision.outcome = Outcome.COMPLETED
        return decision
    if isinstance(value, timedelta):
        wanted = now + value
    elif isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            return _failure(
                decision, check,
                f"TypeError: check {check.name!r} returned a naive datetime ({value.isoformat()}); "
                "return an aware datetime", now,
            )
        wanted = value
    else:
        return _failure(
            decision, check,
            f"TypeError: check {check.name!r} returned {type(value).__name__} ({value!r:.80}); "
            "expected None, a timedelta or an aware datetime", now,
        )
    if wanted < now or wanted > now + check.horizon:
        decision.outcome = Outcome.HORIZON
        decision.error = f"next check {wanted.isoformat()} is outside [now, now + {check.horizon.days} days]"
        return decision
    if job.check_count >= check.checks_allowed:
        decision.outcome = Outcome.MAX_CHECKS
        return decision
    decision.event = Event.RESCHEDULE
    decision.next_check_at = slots.next_check(wanted, now, int(setting("SLOT_MINUTES")))
    return decision


def _failure(decision: Decision, check: Check | None, error: str, now: datetime) -> Decision:
    job = decision.job
    decision.error = error
    job.failure_count += 1
    _record_error(job, error, now)
    retry_at = get_handler()(job, check, now)
    if retry_at is None:
        decision.event, decision.outcome = Event.FINISH, Outcome.FAILED
    else:
        decision.event = Event.RETRY
        # The handler's time is kept as it is: the built-in handlers round to slots themselves.
        decision.next_check_at = slots.require_aware(retry_at, "the error handler's retry time")
    return decision


def _record_error(job: FutureJob, error: str, now: datetime) -> None:
    job.last_error = error
    kept = int(setting("RECENT_ERRORS"))
    job.recent_errors = ([*job.recent_errors, {"at": now.isoformat(), "error": error}])[-kept:]


def failed_run(job: FutureJob, error: str, now: datetime, seconds: float = 0.0) -> Decision:
    """The decision for a run that failed outside the check's own control (crash, hard timeout)."""
    try:
        check: Check | None = get_check(job.job_exec)
    except PrescientError:
        check = None
    return _failure(Decision(job=job, event=Event.FINISH, seconds=seconds, ran=True), check, error, now)


def run_one(job: FutureJob, entities: dict[tuple[str, str], models.Model], now: datetime) -> Decision:
    """Run the check of one claimed job and decide what follows."""
    try:
        check = get_check(job.job_exec)
    except PrescientError as exc:
        return _failure(Decision(job=job, event=Event.FINISH), None, runner.describe(exc), now)
    try:
        apps.get_model(job.entity_name)
    except (LookupError, ValueError) as exc:
        return _failure(Decision(job=job, event=Event.FINISH), check, runner.describe(exc), now)
    entity = entities.get((job.entity_name, job.entity_key))
    if entity is None:
        return Decision(job=job, event=Event.FINISH, outcome=Outcome.ENTITY_MISSING)
    label = f"{check.name}[{job.entity_name}#{job.entity_key}]"
    result = runner.call(check.func, (entity, job), check.timeout, label)
    return decide(job, check, result, now)


# --- settle ----------------------------------------------------------------------------------

_SETTLE_FIELDS = [
    "state", "last_state", "next_check_at", "check_count", "run_count", "failure_count",
    "total_run_seconds", "last_error", "recent_errors", "reserved_at", "reserved_by",
]


def settle(decisions: list[Decision], token: str, now: datetime, summary: TickSummary) -> None:
    """Write a batch's results back in one transaction, each through the transition table.

    Only rows still reserved under ``token`` are touched: a job buried meanwhile keeps its new
    state and the result is discarded. A job killed or cancelled during its run ends that way.
    """
    if not decisions:
        return
    with transaction.atomic():
        current = {
            job.pk: job
            for job in FutureJob.objects.select_for_update().filter(
                pk__in=[d.job.pk for d in decisions], reserved_by=token
            )
        }
        ended: list[int] = []
        history: list[JobHistory] = []
        updated: list[FutureJob] = []
        for decision in decisions:
            job = current.get(decision.job.pk)
            if job is None:
                summary.counts[DISCARDED] += 1
                logger.warning("job id=%s lost its reservation during the run; result discarded", decision.job.pk)
                continue
            ran = decision.job  # carries the counters updated by the run
            job.failure_count = ran.failure_count
            job.last_error = ran.last_error
            job.recent_errors = ran.recent_errors
            if decision.ran:
                job.run_count += 1
                job.total_run_seconds += decision.seconds
            event, outcome = decision.event, decision.outcome
            if job.end_requested:
                event, outcome = Event.FINISH, job.end_requested
            try:
                to = states.target(job, event)
            except InvalidTransition as exc:  # a row in a state no run should meet: leave it be
                summary.counts[DISCARDED] += 1
                logger.error("job id=%s result discarded: %s", job.pk, exc)
                continue
            if to == END:
                ended.append(job.pk)
                history.append(JobHistory.from_job(job, outcome, now))
                summary.counts[outcome] += 1
                _log_finished(job, outcome, decision)
                continue
            if event in (Event.RESCHEDULE, Event.RETRY):
                job.next_check_at = decision.next_check_at
            if event == Event.RESCHEDULE:
                job.check_count += 1
            summary.counts[_SUMMARY_KEY[event]] += 1
            job.last_state = State.SCHEDULED if to == State.PAUSED else ""
            job.state = to
            job.reserved_by, job.reserved_at = "", None
            updated.append(job)
            _log_finished(job, event, decision)
        if history:
            JobHistory.objects.bulk_create(history)
            FutureJob.objects.filter(pk__in=ended).delete()
        if updated:
            FutureJob.objects.bulk_update(updated, _SETTLE_FIELDS)


def _log_finished(job: FutureJob, what: str, decision: Decision) -> None:
    logger.info(
        "check=%s entity=%s#%s outcome=%s duration=%.3fs%s",
        job.job_exec, job.entity_name, job.entity_key, what, decision.seconds,
        f" error={decision.error}" if decision.error else "",
    )


# --- the tick ----------------------------------------------------------------------------------


class _Lease:
    """Keeps a tick's claims fresh while it works through a long batch.

    The tick's clock is its ``now`` plus the time elapsed since it started, so a replayed
    ``--now`` stays consistent with the stale rule.
    """

    def __init__(self, now: datetime) -> None:
        self.now, self.started = now, time.monotonic()
        self.every = stale_after_seconds() / 4
        self.last = self.started

    def renew_if_due(self, token: str) -> None:
        if time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        stamp = self.now + timedelta(seconds=self.last - self.started)
        FutureJob.objects.filter(reserved_by=token).update(reserved_at=stamp)



def tick(now: datetime | None = None, *, batch_size: int | None = None) -> TickSummary:
    """Process every job due at ``now`` (default: the real time), batch by batch, then return.

    Stale reservations are buried first. Jobs re-scheduled or retried during the tick are due
    after ``now`` and so are not run twice by it.
    """
    now = timezone.now() if now is None else slots.require_aware(now, "now")
    size = int(batch_size or setting("BATCH_SIZE"))
    summary = TickSummary()
    lease = _Lease(now)
    has_due, has_stale = survey(now)
    if has_stale:
        summary.counts[BURIED] += bury_stale(now)
    while has_due:
        token = new_token()
        jobs = claim(now, size, token)
        if not jobs:
            break
        entities = load_entities(jobs)
        decisions = []
        for job in jobs:
            lease.renew_if_due(token)
            decisions.append(run_one(job, entities, now))
        settle(decisions, token, now, summary)
    return summary
