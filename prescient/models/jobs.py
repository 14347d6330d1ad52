"""The live table of pending jobs: data and invariants only."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from prescient.wording import entity_text

from .. import interrupts
from ..cleaning import unstorable
from ..reads import ReadQuerySet
from ..states import Outcome, State

#: Largest checkpoint a job may keep, in bytes of JSON.
CHECKPOINT_LIMIT = 64 * 1024


class FutureJobQuerySet(ReadQuerySet["FutureJob"]):
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
    #: Its keys under its check's limit and rate (``<name>:<value>``; "" when it has none), read
    #: from its entity when it was scheduled: see prescient.limits.
    limit_key = models.CharField(_("limit key"), max_length=255, blank=True, default="", db_default="", editable=False)
    rate_key = models.CharField(_("rate key"), max_length=255, blank=True, default="", db_default="", editable=False)
    #: The history row (its id) of the finished job this one runs again (prescient.rerun), kept
    #: in this job's own history row when it ends: the two rows link to each other.
    rerun_of = models.BigIntegerField(
        _("re-run of"), null=True, blank=True, editable=False,
        help_text=_("The finished job (history row id) this job runs again."),
    )

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
            # The scheduled jobs by check, then due time: each check's oldest due job and a count of
            # its due jobs that stops at a bound, past 100,000 live jobs (prescient/health.py, 0026).
            models.Index(
                fields=["job_exec", "next_check_at", "id"], name="prescient_job_check_due",
                condition=Q(state=State.SCHEDULED),
            ),
            # The admin's job list, in its order, and its date drill-down (MIN/MAX): every state;
            # ``state`` last, for a due query the planner might send here (migration 0025).
            models.Index(fields=["next_check_at", "id", "state"], name="prescient_job_next"),
            models.Index(
                fields=["queue", "-priority", "next_check_at", "id"], name="prescient_task_due",
                condition=Q(state=State.SCHEDULED) & ~Q(queue=""),
            ),
            # The runs in flight per limit key (a claim of limited jobs counts them), and the
            # due limited jobs (their own claim): prescient/engine/store/limited.py.
            models.Index(
                fields=["limit_key"], name="prescient_job_limit_in_flight",
                condition=~Q(limit_key="") & ~Q(reserved_by=""),
            ),
            models.Index(
                fields=["-priority", "next_check_at", "id"], name="prescient_job_limited_due",
                condition=Q(state=State.SCHEDULED) & (~Q(limit_key="") | ~Q(rate_key="")),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_exec} {entity_text(self.entity_name, self.entity_key)} ({self.state})"

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
