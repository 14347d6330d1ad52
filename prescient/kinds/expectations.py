"""The kind of an expectation's job (``@prescient.expectation``): a ladder of rungs, each a run.

A pending expectation is one job; its ``payload`` holds its ladder as it fell for its instance
(``rungs``: aware times, counted from its start in its calendar's open time), the number of
rungs reached (``step``) and when each was climbed (``reached``), its calendar, and, once met,
when (``met_at``). At each rung the instance is read by primary key (the batch's in bulk first,
one query per expectation for a Q), then read again, locked, in the short transaction that
records the rung (:func:`read_and_record`), just before its handler would be called:

- it meets the expectation: the job ends ``met`` and the handler is not called;
- it does not: ``handler(instance, job, step)`` is called, then
  :data:`prescient.signals.expectation_missed` is sent, in the same run under the job's
  timeout; the job is due at its next rung, or, past the last, ends ``missed``;
- the handler raises: a failed run, retried under the usual policy at the same rung;
- it is gone: the job ends ``entity_missing``.

The ladder is the job's bound: ``MAX_CHECKS`` does not apply. How jobs are started and ended
by saves is :mod:`.expecting`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.checks import CheckMessage
from django.core.exceptions import FieldError
from django.db import connections, models, router, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext

from prescient import calendars, diagnostics, slots
from prescient.checks import Check
from prescient.clock import from_iso
from prescient.conf import setting
from prescient.engine import bulk, runner, store
from prescient.engine.decisions import Decision, describe, failure
from prescient.engine.kind import JobKind
from prescient.exceptions import PrescientError, RerunRefused
from prescient.expectations import KIND, Expectation, get_expectation, registered
from prescient.models import FutureJob, JobHistory
from prescient.signals import expectation_missed
from prescient.states import Event, Outcome
from prescient.wording import counted, entity_text, when_text

from .checks import handed_back_or_failed, load_entities
from .links import entity_link

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite

logger = logging.getLogger(__name__)

#: What a rung's run returns when it found the instance met: the job ends ``met``.
MET = "prescient:met"
#: ... when the instance was gone: the job ends ``entity_missing``.
GONE = "prescient:gone"
#: ... when the job was no longer the run's (its end requested by a save, a kill or a cancel;
#: its claim lost): nothing climbed, the settle finds what became of it.
LEFT = "prescient:left"


@dataclass
class Rung:
    """What one rung's run needs: the instance, and whether it meets the expectation (None:
    its ``met`` is a callable, asked during the run)."""

    instance: models.Model
    met: bool | None


def rungs_of(job: FutureJob | JobHistory) -> list[datetime]:
    """The times of a job's rungs, as kept in its payload."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    return [datetime.fromisoformat(value) for value in payload.get("rungs") or []]


def step_of(job: FutureJob | JobHistory) -> int:
    """How many rungs of its ladder a job has reached (the handler called, not met)."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    step = payload.get("step", 0)
    return step if isinstance(step, int) else 0


def mark_met(job: FutureJob, now: datetime) -> None:
    """Note on ``job`` (in its payload, kept in its history row) when it was found met."""
    job.payload = {**(job.payload if isinstance(job.payload, dict) else {}), "met_at": now.isoformat()}


def climb(expectation: Expectation, instance: models.Model, job: FutureJob, step: int) -> str | None:
    """One rung, under the job's timeout: the instance read again and ``met`` asked of it in the
    transaction that records the rung on the job; not met, the handler called (with the instance
    as read) and the signal sent. Returns :data:`MET`, :data:`GONE` or :data:`LEFT` when the
    handler was not called, None when the rung was climbed."""
    verdict, instance = read_and_record(expectation, instance, job, step)
    if verdict is not None:
        return verdict
    runner.resolve(expectation.func(instance, job, step))  # an async def handler is awaited
    # Robustly: a receiver that raises is logged by Django; it neither undoes the rung nor
    # makes the handler run again.
    expectation_missed.send_robust(
        sender=type(instance), name=expectation.name, instance=instance, step=step, job=job
    )
    return None


def read_and_record(
    expectation: Expectation, instance: models.Model, job: FutureJob, step: int
) -> tuple[str | None, models.Model]:
    """Whether rung ``step`` may be climbed, decided in one transaction that reads the instance
    and, when it is not met, records the rung on the job while the job is still this run's:
    ``payload["reached"][step - 1]``, when the instance was read (this process's clock, taken
    just before the read). The instance's row is locked as it is read (PostgreSQL: ``FOR NO KEY
    UPDATE``), so a save of it either committed before (and is seen, met) or waits until the
    rung is recorded: a handler is never called for an instance whose meeting save had
    committed before it was read. SQLite takes its one write lock first, by recording the rung,
    then reads. Returns the verdict (None: climb) and the instance as read; climbing, ``job``'s
    payload carries the rung's time."""
    read_at = timezone.now()
    payload = dict(job.payload) if isinstance(job.payload, dict) else {}
    reached = payload.get("reached")
    payload["reached"] = [*(reached if isinstance(reached, list) else [])[: step - 1], read_at.isoformat()]
    model = type(instance)
    model_db, jobs_db = router.db_for_write(model, instance=instance), router.db_for_write(FutureJob)
    # One transaction where the model and the jobs share a database (the usual case).
    with transaction.atomic(using=model_db), transaction.atomic(using=jobs_db, savepoint=False):
        features = connections[model_db].features
        locks = features.has_select_for_update
        if not locks and not store.note_in_run(job, payload):
            return LEFT, instance
        rows = model._base_manager.db_manager(model_db).filter(pk=instance.pk)
        if locks:
            rows = rows.select_for_update(no_key=features.has_select_for_no_key_update)
        row = rows.first()
        if row is None or expectation.met_by(row):
            for alias in {model_db, jobs_db}:  # nothing recorded: the job ends
                transaction.set_rollback(True, using=alias)
            return (GONE if row is None else MET), instance
        if locks and not store.note_in_run(job, payload):
            return LEFT, row
    job.payload = payload
    return None, row


def reached_of(job: FutureJob | JobHistory) -> list[datetime]:
    """When each rung reached was climbed (its instance read and found not met), as kept in the
    job's payload; shorter than the ladder until its last rung."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    return [datetime.fromisoformat(value) for value in payload.get("reached") or [] if isinstance(value, str)]


def judge(expectation: Expectation, instance: models.Model) -> str | None:
    """``met`` asked now, and nothing climbed: :data:`MET` when met, None otherwise."""
    return MET if expectation.met_by(instance) else None


def _handed_back_failed_or_met(
    job: FutureJob, check: Check, result: runner.RunResult, decision: Decision, now: datetime
) -> Decision | None:
    """What a call of an expectation's code came to, when that ends the run: handed back (the
    worker stopping), failed (retried, then ``failed``) or met; None when it was not met."""
    ended = handed_back_or_failed(job, check, result, decision, now)
    if ended is not None:
        return ended
    if result.value == MET:
        mark_met(job, now)
        decision.outcome = Outcome.MET
        return decision
    if result.value == GONE:
        decision.outcome = Outcome.ENTITY_MISSING
        return decision
    if result.value == LEFT:
        return runner.released(job, now, result.seconds)
    return None


class ExpectationKind(JobKind):
    """Jobs of ``@prescient.expectation`` declarations, each about one model instance."""

    name = KIND
    verbose_name = "expectation"

    def definition(self, job: FutureJob | JobHistory) -> Check:
        definition = get_expectation(job.job_exec).definition
        assert definition is not None  # set by the decorator
        return definition

    def prepare(self, jobs: Sequence[FutureJob]) -> dict[int, Any]:
        entities = load_entities(jobs)
        met: dict[str, set[str]] = {}
        by_name: dict[str, list[models.Model]] = defaultdict(list)
        for job in jobs:
            entity = entities.get((job.entity_name, job.entity_key))
            if entity is not None:
                by_name[job.job_exec].append(entity)
        for name, instances in by_name.items():
            try:
                expectation = get_expectation(name)
            except PrescientError:
                continue  # reported per job by run()
            if not isinstance(expectation.met, Q):
                continue
            found: set[str] = set()
            met[name] = found
            model = type(instances[0])
            try:
                for chunk in bulk.chunks([instance.pk for instance in instances], 500):
                    rows = model._default_manager.filter(expectation.met).filter(bulk.AnyOf(F("pk"), chunk))
                    found.update(str(pk) for pk in rows.values_list("pk", flat=True))
            except (FieldError, ValueError, TypeError):
                del met[name]  # a Q that does not fit the model: asked (and failed) in each run
        contexts: dict[int, Any] = {}
        for job in jobs:
            entity = entities.get((job.entity_name, job.entity_key))
            if entity is not None:
                known = met.get(job.job_exec)
                contexts[job.pk] = Rung(entity, None if known is None else str(entity.pk) in known)
        return contexts

    def run(self, job: FutureJob, context: Any, now: datetime) -> Decision:
        try:
            expectation = get_expectation(job.job_exec)
            check = self.definition(job)
            expectation.model  # noqa: B018 (raises LookupError when the model is gone)
        except (PrescientError, LookupError) as exc:
            return failure(Decision(job=job, event=Event.FINISH), None, describe(exc), now, exception=exc)
        if not isinstance(context, Rung):
            return Decision(job=job, event=Event.FINISH, outcome=Outcome.ENTITY_MISSING)
        if context.met:
            mark_met(job, now)
            return Decision(job=job, event=Event.FINISH, outcome=Outcome.MET)
        rungs = rungs_of(job) or expectation.rungs(context.instance, job.created_at)
        step = step_of(job) + 1
        label = f"{expectation.name}[{entity_text(job.entity_name, job.entity_key)}] rung {step}"
        if step <= len(rungs) and now < rungs[step - 1]:
            return self._early(job, expectation, check, context, rungs[step - 1], label, now)
        result = runner.call(climb, (expectation, context.instance, job, step), check.timeout, label, KIND)
        decision = Decision(job=job, event=Event.FINISH, seconds=result.seconds, ran=True)
        settled = _handed_back_failed_or_met(job, check, result, decision, now)  # a failure: retried at this rung
        if settled is not None:
            return settled
        job.payload = {**(job.payload if isinstance(job.payload, dict) else {}), "step": step}
        if step >= len(rungs):
            decision.outcome = Outcome.MISSED
            return decision
        decision.event = Event.RESCHEDULE
        decision.next_check_at = slots.next_check(rungs[step], now, int(setting("SLOT_MINUTES")))
        return decision

    def _early(
        self, job: FutureJob, expectation: Expectation, check: Check, context: Rung, rung: datetime, label: str,
        now: datetime,
    ) -> Decision:
        """A run before its rung's time (run now, from the admin, the API or a command): ``met``
        is judged now and nothing is climbed; not met, the job waits for its rung."""
        if context.met is None:  # a callable met, asked under the job's timeout
            result = runner.call(judge, (expectation, context.instance), check.timeout, f"{label} (early)", KIND)
            decision = Decision(job=job, event=Event.FINISH, seconds=result.seconds, ran=True)
            settled = _handed_back_failed_or_met(job, check, result, decision, now)
            if settled is not None:
                return settled
        return Decision(job=job, event=Event.RESCHEDULE,
                        next_check_at=slots.next_check(rung, now, int(setting("SLOT_MINUTES"))))

    def rerun_job(self, row: JobHistory, now: datetime, *, paused: bool) -> FutureJob:
        """Refused: a ladder's rungs were fixed when the expectation started, and re-running its
        spent ladder would call the handler for rungs long past. Starting it again is clearer."""
        raise RerunRefused(
            row.pk,
            "an expectation's ladder was fixed when it started; start it again with "
            f"prescient.expect(instance, {row.job_exec!r}) for a new ladder from now",
        )

    def describe(self, row: FutureJob | JobHistory) -> str:
        return f"{entity_text(row.entity_name, row.entity_key)} · {ladder_text(row)}"

    def progress(self, job: FutureJob) -> str | None:
        # No re-checks: its ladder is its bound (MAX_CHECKS does not apply).
        return gettext("rung %(step)d of %(rungs)d") % {"step": step_of(job), "rungs": len(rungs_of(job))}

    def ladder(self, row: FutureJob | JobHistory) -> dict[str, Any] | None:
        payload = row.payload if isinstance(row.payload, dict) else {}
        return {
            "rungs": rungs_of(row), "step": step_of(row), "reached": reached_of(row), "met_at": payload.get("met_at"),
        }

    def describe_html(self, row: FutureJob | JobHistory, site: AdminSite) -> str:
        return format_html("{} · {}", entity_link(site, row.entity_name, row.entity_key), ladder_text(row))

    def system_checks(self) -> list[CheckMessage]:
        errors = [diagnostics.CALENDAR_MALFORMED(problem) for problem in calendars.problems()]
        for expectation in registered():
            errors.extend(diagnostics.EXPECTATION_MALFORMED(problem) for problem in expectation.problems())
        return errors


def ladder_text(row: FutureJob | JobHistory) -> str:
    """The ladder in words: rungs reached, the next one; met or missed once ended. Times in the
    site's time zone, as the admin shows every other time."""
    rungs, step = rungs_of(row), step_of(row)
    reached = f"rung {step} of {len(rungs)} reached"
    if isinstance(row, JobHistory):
        payload = row.payload if isinstance(row.payload, dict) else {}
        if row.outcome == Outcome.MET:
            met_at = from_iso(payload.get("met_at")) or row.finished_at
            return f"met at {when_text(met_at)}, after {step} of {counted(len(rungs), 'rung')}"
        if row.outcome == Outcome.MISSED:
            return "missed: the one rung reached" if len(rungs) == 1 else f"missed: all {len(rungs)} rungs reached"
        return f"{row.outcome}, {reached}"
    if step < len(rungs):
        return f"{reached}; next {when_text(rungs[step])}"
    return reached

