"""The worker pruner: rows of ``prescient_worker`` processes that stopped long ago.

A worker's row stays while it runs and for :data:`KEEP_STOPPED` after it stopped, or after its
last heartbeat when it never said it stopped (killed, its host gone); the admin's worker page
shows recent ones. Older rows are deleted, once an hour per worker process, judged by the
database's clock (a replay's ``now`` cannot prune a live worker).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q

from prescient.clock import db_now
from prescient.models import Worker

from . import Service

#: How long the row of a stopped worker is kept.
KEEP_STOPPED = timedelta(days=7)


class WorkerPruner(Service):
    name = "worker_pruner"
    interval = 3600.0

    def run_once(self, now: datetime) -> int:
        cutoff = min(now, db_now()) - KEEP_STOPPED
        deleted, _ = Worker.objects.filter(Q(stopped_at__lt=cutoff) | Q(heartbeat_at__lt=cutoff)).delete()
        return int(deleted)
