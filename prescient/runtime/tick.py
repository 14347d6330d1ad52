"""The tick: one pass over what is due, in this process, then return (cron, tests, replays).

Upkeep that is due runs first (stale claims are reclaimed or buried); then batch after batch
is swept until nothing due is left. Jobs re-scheduled or retried during the tick are due after
``now`` and so are not run twice by it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.utils import timezone

from prescient import slots
from prescient.conf import setting, stale_after_seconds
from prescient.engine import store, sweep
from prescient.engine.decisions import BURIED, TickSummary
from prescient.maintenance import run_due
from prescient.maintenance.rescuer import Rescuer


class _Lease:
    """Keeps a tick's claims fresh while it works through a long batch.

    The tick's clock is its ``now`` plus the time elapsed since it started, so a replayed
    ``--now`` stays consistent with the stale rule.
    """

    def __init__(self, now: datetime) -> None:
        self.now, self.started = now, time.monotonic()
        self.every = stale_after_seconds() / 4
        self.last = self.started

    def renew_if_due(self, token: str) -> None:
        if time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        store.renew_leases(token, self.now + timedelta(seconds=self.last - self.started))


def tick(now: datetime | None = None, *, batch_size: int | None = None) -> TickSummary:
    """Process every job due at ``now`` (default: the real time), batch by batch, then return."""
    now = timezone.now() if now is None else slots.require_aware(now, "now")
    size = int(batch_size or setting("BATCH_SIZE"))
    summary = TickSummary()
    lease = _Lease(now)
    survey = sweep.survey(now)
    done = run_due(now, survey=survey)
    summary.counts[BURIED] += done.get(Rescuer.name, 0)
    if survey.due:
        while sweep.sweep_batch(now, size, summary, before_each=lease.renew_if_due):
            pass
    return summary
