"""Recurring schedules and the occurrences they produced."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from ..reads import ReadManager, ReadQuerySet


class CatchUp(models.TextChoices):
    """What a schedule does with occurrences missed while nothing ran."""

    LATEST = "latest", _("run the newest missed occurrence")
    ALL = "all", _("run each missed occurrence, oldest first")
    SKIP = "skip", _("run none; wait for the next")


class ScheduleQuerySet(ReadQuerySet["Schedule"]):
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

    #: Read off the primary inside prescient.reads.reading (the pages, the API, the metrics).
    objects = ReadManager()

    class Meta:
        verbose_name = _("occurrence")
        verbose_name_plural = _("occurrences")
        ordering = ["-at"]
        constraints = [models.UniqueConstraint(fields=["schedule", "at"], name="prescient_one_occurrence")]
        indexes = [models.Index(fields=["produced_at"], name="prescient_occurrence_produced")]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.at.isoformat()}: {self.outcome}"
