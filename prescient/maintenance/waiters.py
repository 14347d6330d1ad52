"""The waiter repair: waiting jobs whose parents have all ended, or one of them failed.

Waiting jobs are moved on in the transaction that ends their parent
(:func:`prescient.engine.store.release_waiters`). This duty finds any that were missed, such
as rows written by an older version during a rolling deploy, or links made while a parent was
ending, and judges them by the same rule: unblocked, or cancelled by a failed parent.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from prescient.engine import store
from prescient.models import FutureJob, JobHistory, JobLink
from prescient.states import Outcome, State

from . import Service

#: Waiting jobs judged per run.
BATCH = 1000


def stuck() -> Q:
    """Waiting jobs that no live parent holds back, or that a parent which failed may cancel."""
    links = JobLink.objects.filter(child_id=OuterRef("pk"))
    live_parent = links.filter(parent_id__in=FutureJob.objects.values("pk"))
    failed_parent = links.filter(
        on_parent_failure="cancel",
        parent_id__in=JobHistory.objects.exclude(outcome=Outcome.COMPLETED).values("job_id"),
    )
    return ~Exists(live_parent) | Exists(failed_parent)


def repair(now: datetime, limit: int = BATCH) -> int:
    """Move on up to ``limit`` stuck waiting jobs (call in a transaction); returns how many."""
    waiting = FutureJob.objects.filter(state=State.WAITING).filter(stuck())
    return store.resolve_waiting(waiting, now, limit)


class WaiterRepair(Service):
    name = "waiter_repair"
    interval = 60.0

    def run_once(self, now: datetime) -> int:
        return repair(now)
