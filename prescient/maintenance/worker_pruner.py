"""The worker pruner: rows of ``prescient_worker`` processes that stopped long ago.

A worker's row stays while it runs and for :data:`KEEP_STOPPED` after it stopped (the admin's
worker page shows recent ones); older rows are deleted, once an hour per worker process.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from prescient.models import Worker

from . import Service

#: How long the row of a stopped worker is kept.
KEEP_STOPPED = timedelta(days=7)


class WorkerPruner(Service):
    name = "worker_pruner"
    interval = 3600.0

    def run_once(self, now: datetime) -> int:
        deleted, _ = Worker.objects.filter(stopped_at__lt=now - KEEP_STOPPED).delete()
        return int(deleted)
