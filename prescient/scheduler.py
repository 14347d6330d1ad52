"""The sweep: claim due jobs, run their checks, settle the outcomes.

*claim* marks a batch of due rows ``running`` in one statement (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so concurrent ticks and workers take disjoint batches); *run* loads the entities in
bulk and calls each check under its timeout; *settle* writes the results back in one
transaction per batch, through the transition table, guarded by the batch's reservation token.
A tick is sweeps until nothing due is left.
"""

from __future__ import annotations

import copy
import logging
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connection, models, transaction
from django.db.models import F
from django.utils import timezone

from . import bulk, runner, slots, states
from .conf import setting, stale_after_seconds
from .errors import get_handler
from .exceptions import InvalidTransition, PrescientError
from .models import FutureJob, JobHistory
from .registry import TASK_ENTITY, Check, get_check
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


def _due_order(now: datetime, queues: list[str] | None) -> models.QuerySet[FutureJob]:
    """Due jobs in claim order: oldest first; of ``queues`` only, by priority then age, if given."""
    if queues is None:
        return FutureJob.objects.due(now).order_by("next_check_at", "id")
    return FutureJob.objects.due(now).filter(queue__in=queues).order_by("-priority", "next_check_at", "id")


def claim(now: datetime, limit: int, token: str, queues: list[str] | None = None) -> list[FutureJob]:
    """Mark up to ``limit`` due jobs ``running`` under ``token`` and return them, oldest first.

    ``queues``: only jobs of these queues (``""`` is the queue of checks), highest priority
    first (django.tasks workers started with ``--queue``).

    On PostgreSQL this is one statement (pick with ``FOR UPDATE SKIP LOCKED``, update, return
    the rows); elsewhere a guarded update of the picked ids, then a read of what it took.
    """
    if connection.vendor == "postgresql":
        return _claim_returning(now, limit, token, queues)
    due = _due_order(now, queues)
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
    return list(FutureJob.objects.filter(reserved_by=token).order_by(*_due_order(now, queues).query.order_by))


def _claim_returning(now: datetime, limit: int, token: str, queues: list[str] | None = None) -> list[FutureJob]:
    # The picked ids are a MATERIALIZED CTE, evaluated exactly once: a plain ``IN (sub-select)``
    # may be re-run by PostgreSQL for each row it updates, each run skipping the rows already
    # locked, and so claim far more than ``limit`` jobs.
    pick_sql, pick_params = (
        _due_order(now, queues).values("pk")[:limit].query.sql_with_params()
    )
    meta = FutureJob._meta
    qn = connection.ops.quote_name
    table = qn(meta.db_table)
    columns = ", ".join(f"{table}.{qn(f.column)}" for f in meta.concrete_fields)
    sql = (
        f"WITH picked (pk) AS MATERIALIZED ({pick_sql} FOR UPDATE SKIP LOCKED) "
        f"UPDATE {table} SET {qn('state')} = %s, {qn('reserved_at')} = %s, {qn('reserved_by')} = %s "
        f"FROM picked WHERE {table}.{qn(meta.pk.column)} = picked.pk AND {table}.{qn('state')} = %s "
        f"RETURNING {columns}"
    )
    params = [*pick_params, State.RUNNING.value, now, token, State.SCHEDULED.value]
    jobs = list(FutureJob.objects.raw(sql, params))
    jobs.sort(key=lambda job: (job.next_check_at, job.pk))
    if queues is not None:
        jobs.sort(key=lambda job: -job.priority)  # stable: by priority, then as above
    return jobs


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
    sql, params = _survey_statement(now, cutoff)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return bool(row[0]), bool(row[1])


def _survey_sql(now: datetime, cutoff: datetime) -> tuple[str, list[Any]]:
    due_sql, due_params = FutureJob.objects.due(now).order_by().values("pk")[:1].query.sql_with_params()
    # Any old reservation, whatever its state: a superset of _stale() that PostgreSQL plans in
    # half the time (planning is most of what this query costs); bury_stale() sorts them out.
    stale = FutureJob.objects.in_flight().filter(reserved_at__lt=cutoff).order_by()
    stale_sql, stale_params = stale.values("pk")[:1].query.sql_with_params()
    return f"SELECT EXISTS({due_sql}), EXISTS({stale_sql})", [*due_params, *stale_params]


#: Two instants no caller passes, to find where ``now`` and the cutoff go among the parameters.
_NOW_MARK = datetime(1999, 12, 31, 23, 59, 58, 123457, tzinfo=dt_timezone.utc)
_CUTOFF_MARK = datetime(1999, 12, 31, 23, 59, 59, 654321, tzinfo=dt_timezone.utc)
_survey_cache: dict[tuple[str, str], tuple[str, list[Any], int, int]] = {}


def _survey_statement(now: datetime, cutoff: datetime) -> tuple[str, list[Any]]:
    """The survey's SQL, compiled by the ORM once per connection (compiling cost more than
    running it), with ``now`` and ``cutoff`` put in place."""
    due_field, stale_field = FutureJob._meta.get_field("next_check_at"), FutureJob._meta.get_field("reserved_at")
    key = (connection.alias, connection.vendor)
    cached = _survey_cache.get(key)
    if cached is None:
        sql, params = _survey_sql(_NOW_MARK, _CUTOFF_MARK)
        now_at = [i for i, p in enumerate(params) if p == due_field.get_db_prep_value(_NOW_MARK, connection)]
        cut_at = [i for i, p in enumerate(params) if p == stale_field.get_db_prep_value(_CUTOFF_MARK, connection)]
        if len(now_at) != 1 or len(cut_at) != 1:  # not the shape expected: compile every time
            return _survey_sql(now, cutoff)
        cached = _survey_cache[key] = (sql, params, now_at[0], cut_at[0])
    sql, params, now_at, cut_at = cached
    params = list(params)
    params[now_at] = due_field.get_db_prep_value(now, connection)
    params[cut_at] = stale_field.get_db_prep_value(cutoff, connection)
    return sql, params


#: Reservations made by prescient_worker start with this; a worker renews its leases while it
#: lives, so a stale one means the worker is gone and its claim can simply run again.
WORKER_TOKEN_PREFIX = "worker:"


def _reclaim(job: FutureJob, now: datetime) -> None:
    """A dead worker's claim: counted as a failed run and due again at once (or failed)."""
    job.failure_count += 1
    if job.entity_name == TASK_ENTITY:
        from .tasks import note_lost_attempt

        note_lost_attempt(job, now)
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
    """The entities of ``jobs``, fetched with one query per model. Missing ones are absent.

    Each model's default manager is used, so a manager that hides rows hides their entities.
    """
    keys: dict[str, set[str]] = defaultdict(set)
    for job in jobs:
        keys[job.entity_name].add(job.entity_key)
    found: dict[tuple[str, str], models.Model] = {}
    for name, wanted in keys.items():
        try:
            model = apps.get_model(name)
        except (LookupError, ValueError):
            continue  # reported per job by run_one
        pk = model._meta.pk
        assert pk is not None
        values = []
        for key in wanted:
            try:
                values.append(pk.to_python(key))
            except (ValueError, TypeError, ValidationError):
                continue  # cannot be a key of this model: the entity is missing
        for chunk in bulk.chunks(values, 500):
            for obj in model._default_manager.filter(bulk.AnyOf(F("pk"), chunk)):
                found[(name, str(obj.pk))] = obj
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
    decision = _failure(Decision(job=job, event=Event.FINISH, seconds=seconds, ran=True), check, error, now)
    if job.entity_name == TASK_ENTITY:
        from .tasks import after_failed_run

        after_failed_run(decision, check, now)
    return decision


def run_one(job: FutureJob, entities: dict[tuple[str, str], models.Model], now: datetime) -> Decision:
    """Run the check of one claimed job and decide what follows."""
    try:
        check = get_check(job.job_exec)
    except PrescientError as exc:
        return _failure(Decision(job=job, event=Event.FINISH), None, runner.describe(exc), now)
    if "task" in check.options:
        from .tasks import run_task  # a django.tasks job: about no entity

        return run_task(job, check, now)
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
    "total_run_seconds", "last_error", "recent_errors", "reserved_at", "reserved_by", "payload",
]


def settle(decisions: list[Decision], token: str, now: datetime, summary: TickSummary) -> None:
    """Write a batch's results back in one transaction, each through the transition table.

    Only rows still reserved under ``token`` are touched: a job buried meanwhile keeps its new
    state and the result is discarded. A job killed or cancelled during its run ends that way.
    """
    if not decisions:
        return
    with transaction.atomic():
        rest = _settle_guarded(decisions, token, now, summary) if connection.vendor == "postgresql" else decisions
        if rest:
            _settle_locked(rest, token, now, summary)


def _count_run(job: FutureJob, decision: Decision) -> None:
    """Carry what the run changed (``decision.job``) over to ``job``."""
    ran = decision.job
    job.failure_count = ran.failure_count
    job.last_error = ran.last_error
    job.recent_errors = ran.recent_errors
    job.payload = ran.payload  # a task's attempts and return value
    if decision.ran:
        job.run_count += 1
        job.total_run_seconds += decision.seconds


def _settle_guarded(decisions: list[Decision], token: str, now: datetime, summary: TickSummary) -> list[Decision]:
    """Settle the common case without reading the rows first; return what it could not settle.

    A job whose run ends, is re-scheduled or retried, still ``running`` under ``token`` with
    no end requested (as it was claimed) moves as the transition table says for ``running``:
    one ``DELETE … RETURNING`` (its history row is made from the row deleted) and one
    ``UPDATE`` for the rest, each guarded by those same conditions. A job the guard turns away
    (paused, killed or buried meanwhile) is settled by :func:`_settle_locked`.
    """
    finishing: dict[int, Decision] = {}
    moving: list[tuple[FutureJob, Decision]] = []
    rest: list[Decision] = []
    for decision in decisions:
        job = decision.job
        fast = (
            decision.event in (Event.FINISH, Event.RESCHEDULE, Event.RETRY)
            and job.state == State.RUNNING and job.reserved_by == token and not job.end_requested
        )
        to = None
        if fast:
            try:
                to = states.target(job, decision.event)
            except InvalidTransition:
                pass  # _settle_locked reports it
        if to == END:
            finishing[job.pk] = decision
        elif to == State.SCHEDULED:
            moved = copy.copy(job)
            _count_run(moved, decision)
            moved.next_check_at = decision.next_check_at
            if decision.event == Event.RESCHEDULE:
                moved.check_count += 1
            moved.state, moved.last_state = State.SCHEDULED, ""
            moved.reserved_by, moved.reserved_at = "", None
            moving.append((moved, decision))
        else:
            rest.append(decision)
    guard = {"reserved_by": token, "state": State.RUNNING.value, "end_requested": ""}
    if finishing:
        history: list[JobHistory] = []
        for job in bulk.delete_returning(FutureJob, list(finishing), guard):
            decision = finishing.pop(job.pk)
            _count_run(job, decision)
            history.append(JobHistory.from_job(job, decision.outcome, now))
            summary.counts[decision.outcome] += 1
            _log_finished(job, decision.outcome, decision)
        fields = bulk.insert_fields(JobHistory)
        bulk.insert_rows(JobHistory, bulk.prep_all(history, fields, add=True), fields)
        rest.extend(finishing.values())
    if moving:
        hit = set(bulk.update_rows(FutureJob, [job for job, _ in moving], _SETTLE_FIELDS, guard=guard))
        for job, decision in moving:
            if job.pk not in hit:
                rest.append(decision)
                continue
            summary.counts[_SUMMARY_KEY[decision.event]] += 1
            _log_finished(job, _SUMMARY_KEY[decision.event], decision)
    return rest


def _settle_locked(decisions: list[Decision], token: str, now: datetime, summary: TickSummary) -> None:
    """Settle each decision against its row as it is now, read and locked (call in a transaction)."""
    current = _lock_reserved([d.job.pk for d in decisions], token)
    ended: list[int] = []
    history: list[JobHistory] = []
    updated: list[FutureJob] = []
    for decision in decisions:
        job = current.get(decision.job.pk)
        if job is None:
            summary.counts[DISCARDED] += 1
            logger.warning("job id=%s lost its reservation during the run; result discarded", decision.job.pk)
            continue
        _count_run(job, decision)
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
        _log_finished(job, _SUMMARY_KEY[event], decision)
    if history:
        fields = bulk.insert_fields(JobHistory)
        bulk.insert_rows(JobHistory, bulk.prep_all(history, fields, add=True), fields)
        bulk.delete_rows(FutureJob, ended)
    if updated:
        bulk.update_rows(FutureJob, updated, _SETTLE_FIELDS)


def _lock_reserved(pks: list[int], token: str) -> dict[int, FutureJob]:
    """The jobs among ``pks`` still reserved under ``token``, locked until the transaction ends."""
    rows = FutureJob.objects.select_for_update().filter(bulk.AnyOf(F("pk"), pks), reserved_by=token)
    return {job.pk: job for job in rows.order_by()}


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
