"""The worker processes, as they report themselves."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Worker(models.Model):
    """A running ``prescient_worker`` process: its identity, heartbeat and progress."""

    name = models.CharField(_("name"), max_length=64, unique=True)
    hostname = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("pid"))
    concurrency = models.PositiveIntegerField(_("concurrency"), default=1)
    lanes = models.PositiveIntegerField(
        _("lanes"), default=1, db_default=1, help_text=_("Jobs each child runs at once.")
    )
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
