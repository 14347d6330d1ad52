"""Running totals behind the Prometheus counters and histograms (:mod:`prescient.api.metrics`).

A counter must survive the process that counted: workers come and go, and every scrape may be
served by another web process. So each settled run adds to these rows in the transaction
that settles it (:mod:`prescient.engine.store.tallies`), and a scrape sums them. A row is one
figure of one check and queue (``runs:completed``, ``duration_le:2.5``, ``rescues:reclaimed``
...) in one of :data:`SHARDS` shards, so that workers settling the same check at once seldom
wait on the same row. Rows only grow; nothing prunes them (a handful per check and figure).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .reads import ReadManager

#: Rows per figure: a process adds to the shard of its pid.
SHARDS = 8

#: Upper bounds of the buckets of the run duration histogram, in seconds.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
#: Upper bounds of the buckets of the start lag histogram (due time to start), in seconds.
LAG_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0)


def bucket(value: float, bounds: tuple[float, ...]) -> str:
    """The name of the bucket ``value`` falls in: its upper bound (``"2.5"``), or ``"inf"``."""
    for bound in bounds:
        if value <= bound:
            return f"{bound:g}"
    return "inf"


class MetricTally(models.Model):
    """One running total: of figure ``name`` for check ``job_exec`` on ``queue``, in ``shard``."""

    job_exec = models.CharField(_("check"), max_length=200)
    queue = models.CharField(_("queue"), max_length=100, blank=True, default="")
    name = models.CharField(_("figure"), max_length=48)
    shard = models.PositiveSmallIntegerField(_("shard"), default=0)
    value = models.FloatField(_("value"), default=0.0)

    #: Read off the primary inside prescient.reads.reading (the pages, the API, the metrics).
    objects = ReadManager()

    class Meta:
        verbose_name = _("metric tally")
        verbose_name_plural = _("metric tallies")
        constraints = [
            models.UniqueConstraint(fields=["job_exec", "queue", "name", "shard"], name="prescient_one_tally"),
        ]

    def __str__(self) -> str:
        return f"{self.job_exec}[{self.queue}] {self.name} = {self.value:g}"
