"""The kind of the seed article: a check about one entity (``@prescient.check``).

A batch's entities are loaded in bulk, one query per model; each check is called as
``check(entity, job)`` under its timeout and returns ``None`` (done), or a timedelta or an
aware datetime (check again then, rounded up to a slot). A timedelta counts from the slot being
processed (:func:`prescient.slots.after_slot`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.checks import CheckMessage
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F

from prescient import diagnostics, limits, slots
from prescient.checks import RELEASE, Check, get_check, registered
from prescient.conf import setting
from prescient.engine import bulk, runner, store
from prescient.engine.decisions import Decision, describe, failure, safe_repr
from prescient.engine.kind import JobKind
from prescient.exceptions import PrescientError
from prescient.models import FutureJob, JobHistory
from prescient.states import Event, Outcome
from prescient.wording import entity_text

from .links import entity_link

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite


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
            continue  # reported per job by run()
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


def handed_back_or_failed(
    job: FutureJob, check: Check, result: runner.RunResult, decision: Decision, now: datetime
) -> Decision | None:
    """The run's end when a call of the job's code did not return normally: handed back (the
    worker stopping) or failed (retried under its policy, then ``failed``); None otherwise."""
    back = runner.handed_back(job, result, now)
    if back is not None:
        return back
    if result.failed:
        return failure(decision, check, result.error, now, exception=result.exception,
                       exception_path=result.exception_path, traceback=result.traceback)
    return None


def decide(job: FutureJob, check: Check, result: runner.RunResult, now: datetime) -> Decision:
    """Turn what a check returned into the next event for its job."""
    decision = Decision(job=job, event=Event.FINISH, seconds=result.seconds, ran=True)
    value = result.value
    ended = handed_back_or_failed(job, check, result, decision, now)
    if ended is not None:
        return ended
    if value is None:
        decision.outcome = Outcome.COMPLETED
        return decision
    if value is RELEASE:  # the claim handed back: nothing counted, due at the next slot
        return runner.released(job, now, result.seconds)
    slot_minutes = int(setting("SLOT_MINUTES"))
    if isinstance(value, timedelta):
        # Counted from the slot being processed, not from how late in it the run came (as
        # slots.after_slot); the horizon is judged on the delay itself.
        early = value < timedelta(0)
        outside = early or value > check.horizon
        try:
            wanted = slots.floor(now, slot_minutes) + value
        except OverflowError:
            return _bad_value(decision, check, now, OverflowError(
                f"check {check.name!r} returned {safe_repr(value)}, past the last date"
            ))
    elif isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            return _bad_value(decision, check, now, TypeError(
                f"check {check.name!r} returned a naive datetime ({value.isoformat()}); return an aware datetime"
            ))
        wanted = value
        early = wanted < now
        outside = early or wanted > now + check.horizon
    else:
        return _bad_value(decision, check, now, TypeError(
            f"check {check.name!r} returned {type(value).__name__} ({safe_repr(value)}); "
            "expected None, a timedelta or an aware datetime"
        ))
    if outside:
        decision.outcome, decision.asked_check_at = Outcome.HORIZON, wanted
        days = check.horizon / timedelta(days=1)
        where = f"before now ({now.isoformat()})" if early else f"beyond its horizon of {days:g} days"
        decision.reason = f"the check asked for its next check at {wanted.isoformat()}, {where}"
        return decision
    if job.check_count >= check.checks_allowed:
        decision.outcome = Outcome.MAX_CHECKS
        return decision
    decision.event = Event.RESCHEDULE
    decision.next_check_at = slots.next_check(wanted, now, slot_minutes)
    return decision


def _bad_value(decision: Decision, check: Check, now: datetime, exc: Exception) -> Decision:
    """A run that returned what a check may not return: failed with ``exc``."""
    return failure(decision, check, describe(exc), now, exception=exc)


class CheckKind(JobKind):
    """Jobs of ``@prescient.check`` functions, each about one model instance."""

    name = "check"
    verbose_name = "check"

    def definition(self, job: FutureJob | JobHistory) -> Check:
        return get_check(job.job_exec)

    def rerun_job(self, row: JobHistory, now: datetime, *, paused: bool) -> FutureJob:
        """A copy of the finished job: its check (still registered), entity, workflow, queue,
        priority and payload; its keys under the check's limit and rate read again."""
        entry = get_check(row.job_exec)
        keys = [row.entity_key]
        return store.new_job(
            entity_name=row.entity_name, entity_key=row.entity_key, job_exec=entry.name, due=now, now=now,
            workflow=row.workflow, paused=paused, queue=row.queue, priority=row.priority, payload=row.payload,
            limit_key=limits.keys_of_many(entry.limit, entry.name, row.entity_name, keys)[row.entity_key],
            rate_key=limits.keys_of_many(entry.rate, entry.name, row.entity_name, keys)[row.entity_key],
        )

    def prepare(self, jobs: Sequence[FutureJob]) -> dict[int, Any]:
        entities = load_entities(jobs)
        contexts: dict[int, Any] = {}
        for job in jobs:
            entity = entities.get((job.entity_name, job.entity_key))
            if entity is not None:
                contexts[job.pk] = entity
        return contexts

    def run(self, job: FutureJob, context: Any, now: datetime) -> Decision:
        try:
            check = self.definition(job)
        except PrescientError as exc:
            return failure(Decision(job=job, event=Event.FINISH), None, describe(exc), now, exception=exc)
        try:
            apps.get_model(job.entity_name)
        except (LookupError, ValueError) as exc:
            return failure(Decision(job=job, event=Event.FINISH), check, describe(exc), now, exception=exc)
        if context is None:
            return Decision(job=job, event=Event.FINISH, outcome=Outcome.ENTITY_MISSING)
        label = f"{check.name}[{entity_text(job.entity_name, job.entity_key)}]"
        result = runner.call(check.func, (context, job), check.timeout, label)
        return decide(job, check, result, now)

    def describe_html(self, row: FutureJob | JobHistory, site: AdminSite) -> str:
        return entity_link(site, row.entity_name, row.entity_key)

    def system_checks(self) -> list[CheckMessage]:
        errors: list[CheckMessage] = []
        for entry in registered():
            if entry.kind != self.name or entry.model_label is None:
                continue
            try:
                apps.get_model(entry.model_label)
            except LookupError:
                errors.append(
                    diagnostics.CHECK_MODEL_MISSING(
                        f"Check {entry.name!r} names model {entry.model_label!r}, which is not installed",
                    )
                )
        return errors
