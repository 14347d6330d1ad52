"""The history of finished jobs: one row per job that left the live table."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from prescient.wording import entity_text

from ..reads import ReadManager
from ..states import Outcome

if TYPE_CHECKING:
    from .jobs import FutureJob


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
    exception_class_path = models.CharField(_("exception class"), max_length=300, blank=True, default="", db_default="")
    traceback = models.TextField(_("traceback"), blank=True, default="", db_default="")
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
    #: The history row of the finished job this one ran again (prescient.rerun); its own re-runs
    #: are the rows (and the live job) whose ``rerun_of`` is this row's id.
    rerun_of = models.BigIntegerField(
        _("re-run of"), null=True, blank=True, help_text=_("The finished job (history row id) this job ran again.")
    )

    #: Read off the primary inside prescient.reads.reading (the pages, the API, the metrics).
    objects = ReadManager()

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
            # The search box's other half (a key or a workflow): only the rows of a workflow (0027).
            models.Index(fields=["workflow"], name="prescient_hist_workflow", condition=~models.Q(workflow="")),
            # A row's re-runs (prescient.rerun): only the rows that are one are indexed.
            models.Index(fields=["rerun_of"], name="prescient_hist_rerun", condition=models.Q(rerun_of__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.job_exec} {entity_text(self.entity_name, self.entity_key)}: {self.outcome}"

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
            "rerun_of": job.rerun_of,
        }
        fields.update(extra)
        return cls(**fields)
