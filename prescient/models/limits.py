"""The token buckets of rates per key (prescient.limits): one row per key, locked by a claim."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from ..reads import ReadManager


class RateBucket(models.Model):
    """The tokens left to one rate key (``<name>:<value>``) when they were last counted: a claim
    of its jobs locks the row, adds what the time since has refilled (up to the rate's runs) and
    takes one token per run it starts."""

    key = models.CharField(_("key"), max_length=255, unique=True)
    tokens = models.FloatField(_("tokens"))
    refilled_at = models.DateTimeField(_("counted at"))

    #: Read off the primary inside prescient.reads.reading (the pages, the API, the metrics).
    objects = ReadManager()

    class Meta:
        verbose_name = _("rate bucket")
        verbose_name_plural = _("rate buckets")

    def __str__(self) -> str:
        return f"{self.key}: {self.tokens:g} tokens at {self.refilled_at.isoformat()}"
