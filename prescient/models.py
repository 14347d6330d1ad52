"""The live table of pending jobs and the history of finished ones: data and invariants only.
(:class:`MetricTally`, the metrics' running totals, is :mod:`prescient.tallies`'s.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from . import interrupts
from .cleaning import unstorable
from .states import Outcome, State
from .tallies import MetricTally  # noqa: F401 (a model of this app)

#: Largest checkpoint a job may keep, in bytes of JSON.
CHECKPOINT_LIMIT = 64 * 1024


class FutureJobQuerySet(models.QuerySet["FutureJob"]):
    def due(self, now: datetime) -> FutureJobQuerySet:
        """Jobs waiting for a slot that has come (served by the ``prescient_due`` index)."""
        return self.filter(state=State.SCHEDULED, next_check_at__lte=now)

    def in_flight(self) -> FutureJobQuerySet:
        """Jobs held by a claim: reserved, running, or paused while running."""
        return self.exclude(reserved_by="")

    def for_entity(self, instance: models.Model) -> FutureJobQuerySet:
        return self.filter(entity_name=instance._meta.label_lower, entity_key=str(instance.pk))

    def of_workflow(self, name: str) -> FutureJobQuerySet:
        return self.filter(workflow=name)


class FutureJob(models.Model):
    """One pending check of one entity. Finished jobs leave this table for :class:`JobHistory`."""

    #: Which kind of job this is (see prescient.engine.kind): it decides how the job runs.
    #: A database default too: rows written without it (raw SQL, older code) are checks.
    kind = models.CharField(_("kind"), max_length=32, default="check", db_default="check")
    entity_name = models.CharField(_("entity"), max_length=100, help_text=_("Model label, e.g. shop.order"))
    entity_key = models.CharField(_("entity key"), max_length=255)
    job_exec = models.CharField(_("check"), max_length=200)
    workflow = models.CharField(_("workflow"), max_length=200, blank=True, default="")
    state = models.CharField(_("state"), max_length=16, choices=State.choices, default=State.SCHEDULED)
    last_state = models.CharField(
        _("last state"), max_length=16, choices=State.choices, blank=True, default="",
        help_text=_("The state a paused job returns to on release."),
    )
    first_check_at = models.DateTimeField(_("first check at"), editable=False)
    next_check_at = models.DateTimeField(_("next check at"))
    check_count = models.PositiveIntegerField(_("checks"), default=0, help_text=_("Times re-scheduled by its check."))
    run_count = models.PositiveIntegerField(_("runs"), default=0)
    failure_count = models.PositiveIntegerField(_("failures"), default=0)
    total_run_seconds = models.FloatField(_("total run time (s)"), default=0.0)
    last_error = models.TextField(_("last error"), blank=True, default="")
    recent_errors = models.JSONField(_("recent errors"), default=list, blank=True)
    reserved_at = models.DateTimeField(_("reserved at"), null=True, blank=True)
    reserved_by = models.CharField(_("reserved by"), max_length=64, blank=True, default="")
    run_started_at = models.DateTimeField(
        _("run started at"), null=True, blank=True,
        help_text=_("When the run of the current claim started (empty: claimed, not started)."),
    )
    end_requested = models.CharField(
        _("end requested"), max_length=16, choices=Outcome.choices, blank=True, default="",
        help_text=_("Set when a job is killed or cancelled while its run is in flight."),
    )
    end_reason = models.TextField(_("end reason"), blank=True, default="")
    created_at = models.DateTimeField(_("created at"), editable=False)
    # django.tasks jobs (see prescient.tasks); checks leave these at their defaults. Database
    # defaults too: rows written without these columns (raw SQL, older code mid-deploy) are checks.
    queue = models.CharField(_("queue"), max_length=100, blank=True, default="", db_default="")
    priority = models.SmallIntegerField(_("priority"), default=0, db_default=0)
    payload = models.JSONField(_("payload"), null=True, blank=True, help_text=_("A task's arguments and attempts."))
    checkpoint_data = models.JSONField(
        _("checkpoint"), null=True, blank=True, help_text=_("What the last checkpoint of the job's runs saved.")
    )
    sleep_until = models.DateTimeField(
        _("sleep requested until"), null=True, blank=True,
        help_text=_("Set when a job is slept while its run is in flight: the job is due then once the run returns."),
    )
    has_dependants = models.BooleanField(_("has dependants"), default=False, db_default=False, editable=False)

    objects = FutureJobQuerySet.as_manager()

    #: Writes a checkpoint: set by :mod:`prescient.engine.store`, the one writer of job rows
    #: (this module sits below it and cannot import it).
    checkpoint_writer: ClassVar[Callable[[FutureJob, Any], None] | None] = None

    class Meta:
        verbose_name = _("future job")
        verbose_name_plural = _("future jobs")
        ordering = ["next_check_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["entity_name", "entity_key", "job_exec"], name="prescient_one_pending_job"),
            models.CheckConstraint(condition=Q(state__in=State.values), name="prescient_state_valid"),
        ]
        indexes = [
            models.Index(fields=["next_check_at", "id"], name="prescient_job_due", condition=Q(state=State.SCHEDULED)),
            # The claim's order: highest priority first, then oldest (engine/store/claims.py).
            models.Index(
                fields=["-priority", "next_check_at", "id"], name="prescient_job_claim",
                condition=Q(state=State.SCHEDULED),
            ),
            models.Index(fields=["reserved_at"], name="prescient_job_in_flight", condition=~Q(reserved_by="")),
            models.Index(fields=["workflow", "state"], name="prescient_job_workflow"),
            models.Index(
                fields=["queue", "-priority", "next_check_at", "id"], name="prescient_task_due",
                condition=Q(state=State.SCHEDULED) & ~Q(queue=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_exec} {self.entity_name}#{self.entity_key} ({self.state})"

    @property
    def in_flight(self) -> bool:
        return bool(self.reserved_by)

    def should_stop(self) -> bool:
        """Whether this run is asked to stop: its job was paused, killed or slept, or its worker
        is stopping. Cheap (nothing is read from the database): call it in a loop, and return
        ``prescient.RELEASE`` (or anything else) to stop early."""
        return interrupts.asked(self.reserved_by, self.pk)

    def checkpoint(self, data: Any) -> None:
        """Keep ``data`` (JSON, at most 64 KB) on the job at once, in a transaction of its own
        (unless the check runs inside one of its own): the next run of this job, after a
        failure, a timeout, a lost worker or a release, finds it in :attr:`checkpoint_data`.
        Raises TypeError or ValueError, writing nothing, when it cannot be kept."""
        try:
            text = json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"A checkpoint must be JSON: {exc}") from None
        if len(text.encode("utf-8", "surrogatepass")) > CHECKPOINT_LIMIT:
            raise ValueError(f"A checkpoint may hold at most {CHECKPOINT_LIMIT} bytes of JSON")
        problem = unstorable(data, "the checkpoint")
        if problem:
            raise ValueError(problem)
        writer = type(self).checkpoint_writer
        if writer is None:  # pragma: no cover - set when the store is imported
            raise RuntimeError("prescient's store is not loaded")
        writer(self, json.loads(text))


class JobHistory(models.Model):
    """Exactly one row per job that left the live table, written in the same transaction."""

    job_id = models.BigIntegerField(_("job id"), db_index=True)
    kind = models.CharField(_("kind"), max_length=32, default="check", db_default="check")
    entity_name = models.CharField(_("entity"), max_length=100)
    entity_key = models.CharField(_("entity key"), max_length=255)
    job_exec = models.CharField(_("check"), max_length=200)
    workflow = models.CharField(_("workflow"), max_length=200, blank=True, default="")
    outcome = models.CharField(_("outcome"), max_length=16, choices=Outcome.choices)
    check_count = models.PositiveIntegerField(_("checks"), default=0)
    run_count = models.PositiveIntegerField(_("runs"), default=0)
    failure_count = models.PositiveIntegerField(_("failures"), default=0)
    total_run_seconds = models.FloatField(_("total run time (s)"), default=0.0)
    first_check_at = models.DateTimeField(_("first check at"))
    created_at = models.DateTimeField(_("created at"))
    finished_at = models.DateTimeField(_("finished at"))
    last_error = models.TextField(_("last error"), blank=True, default="")
    reason = models.TextField(_("reason"), blank=True, default="")
    #: Outcome ``horizon``: the next check the check asked for (``reason`` says why it was refused).
    asked_check_at = models.DateTimeField(_("check asked for"), null=True, blank=True)
    # Database defaults too: rows written without these columns (raw SQL, older code) are checks.
    queue = models.CharField(_("queue"), max_length=100, blank=True, default="", db_default="")
    priority = models.SmallIntegerField(_("priority"), default=0, db_default=0)
    payload = models.JSONField(_("payload"), null=True, blank=True,
                               help_text=_("A task's arguments, attempts and return value."))
    errors = models.JSONField(_("errors"), default=list, blank=True,
                              help_text=_("The job's recent errors when it ended."))
    checkpoint_data = models.JSONField(
        _("checkpoint"), null=True, blank=True, help_text=_("The job's last checkpoint when it ended.")
    )

    class Meta:
        # "2 finished jobs" (beside "future jobs"); "job history" had no plural.
        verbose_name = _("finished job")
        verbose_name_plural = _("finished jobs")
        ordering = ["-finished_at", "-id"]
        indexes = [
            models.Index(fields=["finished_at"], name="prescient_hist_finished"),
            # The history pruner's: the oldest rows of one outcome (see migration 0011).
            models.Index(fields=["outcome", "finished_at"], name="prescient_hist_outcome"),
            models.Index(fields=["job_exec", "finished_at"], name="prescient_hist_check"),
            models.Index(fields=["entity_name", "entity_key"], name="prescient_hist_entity"),
        ]

    def __str__(self) -> str:
        return f"{self.job_exec} {self.entity_name}#{self.entity_key}: {self.outcome}"

    @classmethod
    def from_job(cls, job: FutureJob, outcome: str, finished_at: datetime, **extra: Any) -> JobHistory:
        """The history row for ``job`` ending with ``outcome`` (not saved)."""
        fields = {
            "job_id": job.pk,
            "kind": job.kind,
            "entity_name": job.entity_name,
            "entity_key": job.entity_key,
            "job_exec": job.job_exec,
            "workflow": job.workflow,
            "outcome": outcome,
            "check_count": job.check_count,
            "run_count": job.run_count,
            "failure_count": job.failure_count,
            "total_run_seconds": job.total_run_seconds,
            "first_check_at": job.first_check_at,
            "created_at": job.created_at,
            "finished_at": finished_at,
            "last_error": job.last_error,
            "reason": job.end_reason,
            "queue": job.queue,
            "priority": job.priority,
            "payload": job.payload,
            "errors": job.recent_errors,
            "checkpoint_data": job.checkpoint_data,
        }
        fields.update(extra)
        return cls(**fields)


class ParentFailure(models.TextChoices):
    """What a waiting job does when a job it waits on ends with an outcome other than completed."""

    CANCEL = "cancel", _("Cancel")  # it ends cancelled, its check never called
    RUN = "run", _("Run")  # it runs as if the parent had completed


class JobLink(models.Model):
    """One edge of a workflow: job ``child_id`` runs after job ``parent_id`` has ended.

    Both are job ids, of a live job or of one in the history (a job keeps its id when it
    ends), so the graph outlives the jobs. Links are written when the child is scheduled and
    never changed.
    """

    parent_id = models.BigIntegerField(_("parent job id"))
    child_id = models.BigIntegerField(_("child job id"))
    on_parent_failure = models.CharField(
        _("on parent failure"), max_length=8, choices=ParentFailure.choices, default=ParentFailure.CANCEL,
    )
    created_at = models.DateTimeField(_("created at"))

    class Meta:
        verbose_name = _("job link")
        verbose_name_plural = _("job links")
        constraints = [
            models.UniqueConstraint(fields=["parent_id", "child_id"], name="prescient_link_unique"),
            models.CheckConstraint(condition=~Q(parent_id=F("child_id")), name="prescient_link_not_self"),
        ]
        indexes = [models.Index(fields=["child_id"], name="prescient_link_child")]

    def __str__(self) -> str:
        return f"{self.parent_id} -> {self.child_id}"


class Workflow(models.Model):
    """A named group of jobs that can be paused and released together."""

    name = models.CharField(_("name"), max_length=200, primary_key=True)
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True)

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_paused(self) -> bool:
        return self.paused_at is not None


class Worker(models.Model):
    """A running ``prescient_worker`` process: its identity, heartbeat and progress."""

    name = models.CharField(_("name"), max_length=64, unique=True)
    hostname = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("pid"))
    concurrency = models.PositiveIntegerField(_("concurrency"), default=1)
    started_at = models.DateTimeField(_("started at"))
    heartbeat_at = models.DateTimeField(_("last heartbeat"))
    last_slot_at = models.DateTimeField(_("last slot processed"), null=True, blank=True)
    stopped_at = models.DateTimeField(_("stopped at"), null=True, blank=True)
    jobs_done = models.PositiveBigIntegerField(_("jobs done"), default=0)
    clock_skew_seconds = models.FloatField(
        _("clock skew (s)"), default=0.0, db_default=0.0,
        help_text=_("The host's clock minus the database's, at the last heartbeat."),
    )

    class Meta:
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        ordering = ["-heartbeat_at"]
        indexes = [models.Index(fields=["heartbeat_at"], name="prescient_worker_heartbeat")]

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A secret that lets another service call the JSON API on behalf of ``user``.

    Only a SHA-256 digest of the secret is stored: the secret itself is shown once, when the
    token is created. The token acts with its user's permissions, and only on the checks it
    is scoped to: the ``checks`` listed, or every check when ``all_checks`` is set.
    """

    name = models.CharField(_("name"), max_length=100, help_text=_("What the token is for, e.g. the calling service."))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="prescient_api_tokens",
        verbose_name=_("user"), help_text=_("The token acts on behalf of this user, with their permissions."),
    )
    prefix = models.CharField(
        _("prefix"), max_length=16, editable=False, help_text=_("The start of the secret, to recognise it.")
    )
    digest = models.CharField(_("digest"), max_length=64, unique=True, editable=False)
    all_checks = models.BooleanField(
        _("all checks"), default=False, help_text=_("Allow every check, including checks registered later.")
    )
    checks = models.JSONField(_("checks"), default=list, blank=True, help_text=_("Names of the checks allowed."))
    created_at = models.DateTimeField(_("created at"), editable=False)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def allows(self, check_name: str) -> bool:
        """Whether this token may act on jobs of the check ``check_name``."""
        return self.all_checks or (isinstance(self.checks, list) and check_name in self.checks)


class CatchUp(models.TextChoices):
    """What a schedule does with occurrences missed while nothing ran."""

    LATEST = "latest", _("run the newest missed occurrence")
    ALL = "all", _("run each missed occurrence, oldest first")
    SKIP = "skip", _("run none; wait for the next")


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def due(self, now: datetime) -> ScheduleQuerySet:
        """Active schedules whose next occurrence is due (served by ``prescient_schedule_due``)."""
        return self.filter(paused_at__isnull=True, due_at__lte=now)


class Schedule(models.Model):
    """A recurring schedule: each occurrence becomes a job of its own (see prescient.cron).

    The fields ``kind`` … ``payload`` are the template of the occurrences' jobs. An empty
    ``entity_key`` gives each occurrence a fresh key (tasks: about no entity); a check
    schedule's key is its entity's, so one of its jobs at most is pending.
    """

    name = models.CharField(_("name"), max_length=200, unique=True)
    kind = models.CharField(_("kind"), max_length=32, default="check")
    entity_name = models.CharField(_("entity"), max_length=100)
    entity_key = models.CharField(_("entity key"), max_length=255, blank=True, default="")
    job_exec = models.CharField(_("check"), max_length=200)
    workflow = models.CharField(_("workflow"), max_length=200, blank=True, default="")
    queue = models.CharField(_("queue"), max_length=100, blank=True, default="")
    priority = models.SmallIntegerField(_("priority"), default=0)
    payload = models.JSONField(_("payload"), null=True, blank=True, help_text=_("A task's arguments."))
    cron = models.CharField(_("cron"), max_length=120, blank=True, default="")
    every_seconds = models.PositiveIntegerField(_("every (s)"), null=True, blank=True)
    timezone = models.CharField(_("time zone"), max_length=64, default="UTC")
    catch_up = models.CharField(_("catch up"), max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    next_at = models.DateTimeField(_("next occurrence"))
    due_at = models.DateTimeField(_("due at"), help_text=_("The next occurrence rounded up to a slot boundary."))
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True)
    declared = models.BooleanField(
        _("declared in code"), default=False, help_text=_("Kept in step with its @prescient.periodic declaration.")
    )
    runs = models.PositiveBigIntegerField(_("runs"), default=0)
    skipped = models.PositiveBigIntegerField(
        _("skipped"), default=0, help_text=_("Occurrences not run: the previous job was still pending.")
    )
    missed = models.PositiveBigIntegerField(
        _("missed"), default=0, help_text=_("Occurrences not run: nothing ran while they were due.")
    )
    last_run_at = models.DateTimeField(_("last run"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"))
    updated_at = models.DateTimeField(_("updated at"))

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron="") & Q(every_seconds__isnull=False)) | (~Q(cron="") & Q(every_seconds__isnull=True)),
                name="prescient_schedule_cron_or_every",
            ),
        ]
        indexes = [
            models.Index(fields=["due_at", "id"], name="prescient_schedule_due", condition=Q(paused_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_paused(self) -> bool:
        return self.paused_at is not None


class Occurrence(models.Model):
    """One occurrence of a schedule that was produced (run or skipped). Its unique constraint
    is what makes two ticks at once produce it once."""

    class Outcome(models.TextChoices):
        RAN = "ran", _("ran")
        SKIPPED = "skipped", _("skipped: its previous job was still pending")

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="occurrences")
    at = models.DateTimeField(_("occurrence"))
    outcome = models.CharField(_("outcome"), max_length=8, choices=Outcome.choices)
    produced_at = models.DateTimeField(_("produced at"))

    class Meta:
        verbose_name = _("occurrence")
        verbose_name_plural = _("occurrences")
        ordering = ["-at"]
        constraints = [models.UniqueConstraint(fields=["schedule", "at"], name="prescient_one_occurrence")]
        indexes = [models.Index(fields=["produced_at"], name="prescient_occurrence_produced")]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.at.isoformat()}: {self.outcome}"
