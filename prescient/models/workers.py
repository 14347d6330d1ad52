"""The worker processes, as they report themselves."""

from __future__ import annotations

import re
import socket

from django.db import models
from django.utils.translation import gettext_lazy as _

from ..reads import ReadManager

#: The longest name given to a worker (``prescient_worker --name``): with the pid and a random
#: part it makes the worker's unique name, and its claims' tokens must fit in 64 characters.
GIVEN_NAME_MAX = 16
#: What a given name may hold: no ``:`` (it separates the parts of the unique name) nor ``/``
#: (it separates the parts of a claim's token).
GIVEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def default_given_name() -> str:
    """A worker's name when none is given: its host's name (its first :data:`GIVEN_NAME_MAX`
    characters, as before names could be given)."""
    return socket.gethostname()[:GIVEN_NAME_MAX] or "worker"


def unique_name(given: str, pid: int, nonce: str) -> str:
    """A worker's unique name, ``<given>:<pid>:<nonce>``: new at each start, as its claims must be."""
    return f"{given}:{pid}:{nonce}"


def given_name(name: str) -> str:
    """The name given to the worker whose unique name is ``name``: stable across its restarts."""
    return name.rsplit(":", 2)[0]


class Worker(models.Model):
    """A running ``prescient_worker`` process: its identity, heartbeat and progress.

    ``name`` is unique to one start of one process (:func:`unique_name`); what stays the same
    across restarts is its ``hostname`` and the name it was given (:func:`given_name`), which
    label its metrics.
    """

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

    #: Read off the primary inside prescient.reads.reading (the pages, the API, the metrics).
    objects = ReadManager()

    class Meta:
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        ordering = ["-heartbeat_at"]
        indexes = [models.Index(fields=["heartbeat_at"], name="prescient_worker_heartbeat")]

    def __str__(self) -> str:
        return self.name
