"""Workflows: named groups of jobs, and the links that make one job wait on another."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from ..reads import ReadManager


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

    #: Read off the primary inside prescient.reads.reading (the pages, the API, the metrics).
    objects = ReadManager()

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

    #: Read off the primary inside prescient.reads.reading (the pages, the API, the metrics).
    objects = ReadManager()

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_paused(self) -> bool:
        return self.paused_at is not None
