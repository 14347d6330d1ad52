"""The rescuer: claims whose lease went stale.

A claim is stale when its lease ran out by the database's clock: its reservation is older than
``STALE_AFTER_SECONDS``, or than its job's own timeout plus a margin when that is longer. What
happens to it, in the words of docs/states.md (and the keys of what :func:`rescue` returns):

- ``handed_back``: a claim whose run never started (``reserved``), returned as it was;
- ``reclaimed``: a worker renews its leases while it lives, so its stale claim means the worker
  is gone: the job counts a failed run and is due again at once;
- ``buried``: any other stale claim (a tick that died), left for a person to decide;
- ``slept``: a job slept while its run was in flight, due when asked;
- ``ended``: a job killed or cancelled while its run was in flight ends as asked (its run will
  never return to end it), with the "worker lost" error in its history row; and a reclaimed
  job past its retries ends ``failed``.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from datetime import datetime, timedelta

from django.db import models, transaction

from prescient import states
from prescient.conf import stale_after_seconds
from prescient.engine import store
from prescient.engine.decisions import (
    BURIED,
    ENDED,
    HANDED_BACK,
    RECLAIMED,
    SLEPT,
    Decision,
    TickSummary,
    failure,
    record_error,
)
from prescient.engine.kind import get_kind
from prescient.engine.sweep import WORKER_TOKEN_PREFIX, Survey, definition_of, lease_seconds
from prescient.exceptions import PrescientError, RunFailed
from prescient.models import FutureJob
from prescient.states import Event

from . import Service

logger = logging.getLogger(__name__)

#: Stale claims dealt with in one transaction (one settle per claim token among them).
BATCH = 500


def stale(cutoff: datetime) -> models.QuerySet[FutureJob]:
    """Claims older than ``cutoff`` in a state the rescuer may move."""
    return (
        FutureJob.objects.in_flight()
        .filter(reserved_at__lt=cutoff, state__in=states.states_with(Event.BURY))
        .order_by()
    )


def decide(job: FutureJob, now: datetime) -> tuple[Decision, str]:
    """What becomes of the stale claim of ``job`` (locked), as a run's result for the settle,
    and what the rescuer calls it (a key of :func:`rescue`'s answer, or ``failed``)."""
    if job.run_started_at is None and not job.end_requested:
        return Decision(job=job, event=Event.HAND_BACK), HANDED_BACK  # never started: nothing charged
    assert job.reserved_at is not None  # a claim: see rescue()
    error = f"worker lost: reservation {job.reserved_by} from {job.reserved_at.isoformat()} went stale"
    if job.end_requested:  # killed or cancelled during the lost run: ends as asked
        record_error(job, error, now)
        return Decision(job=job, event=Event.FINISH, outcome=job.end_requested, error=error), ENDED
    if job.sleep_until is not None:  # slept during the lost run: due when asked
        record_error(job, error, now)
        return Decision(job=job, event=Event.SLEEP, next_check_at=job.sleep_until, error=error), SLEPT
    if not job.reserved_by.startswith(WORKER_TOKEN_PREFIX):  # a tick that died: a person decides
        record_error(job, error, now)
        return Decision(job=job, event=Event.BURY, error=error), BURIED
    # A worker renews its leases while it lives: its stale claim means it is gone. A failed run,
    # judged by the retry policy of any failed run; retried, it is due again at once (its own
    # code did not fail, its worker did).
    decision = failure(Decision(job=job, event=Event.RECLAIM), definition_of(job), error, now,
                       exception=RunFailed(error))
    try:
        get_kind(job.kind).after_lost_run(job, now)
    except PrescientError:
        pass
    if decision.event == Event.RETRY:
        decision.event, decision.next_check_at = Event.RECLAIM, None
        return decision, RECLAIMED
    return decision, "failed"


def rescue(now: datetime) -> Counter[str]:
    """Deal with every stale claim; returns how many jobs were ``reclaimed``, ``handed_back``,
    ``buried``, ``slept`` and ``ended`` (only the keys that happened).

    A claim is stale when its lease (see :func:`~prescient.engine.sweep.lease_seconds`) ran
    out by the database's clock; ``now`` only dates what is written (errors, history rows), so
    a replay's ``now`` cannot take a live claim away. A claim whose run never started is handed
    back, with no failure counted. Each stale claim becomes a run's result (a
    :class:`~prescient.engine.decisions.Decision`) settled as any run's is, in batches
    (:func:`prescient.engine.store.settle`).
    """
    clock = store.db_now()
    cutoff = clock - timedelta(seconds=stale_after_seconds())
    moved: Counter[str] = Counter()
    pks = sorted(stale(cutoff).values_list("pk", flat=True))
    for start in range(0, len(pks), BATCH):
        moved.update(_rescue_batch(pks[start:start + BATCH], clock, now))
    return moved


def _rescue_batch(pks: list[int], clock: datetime, now: datetime) -> Counter[str]:
    moved: Counter[str] = Counter()
    with transaction.atomic():
        store.links.lock_workflows_of_children(pks)  # before the job rows, as a settle takes them
        by_token: defaultdict[str, list[Decision]] = defaultdict(list)
        actions: list[tuple[FutureJob, str]] = []
        for job in FutureJob.objects.select_for_update().filter(pk__in=pks).order_by("pk"):
            if not job.in_flight or job.reserved_at is None:
                continue
            if job.reserved_at >= clock - timedelta(seconds=lease_seconds(job)):
                continue  # a long-running job's own lease has not run out
            decision, action = decide(job, now)
            by_token[job.reserved_by].append(decision)
            actions.append((job, action))
            moved[ENDED if action == "failed" else action] += 1
            logger.warning("job id=%s %s: claim %s went stale%s", job.pk, action, job.reserved_by,
                           f" ({decision.error})" if decision.error else "")
        summary = TickSummary()
        for token, decisions in by_token.items():
            store.settle(decisions, token, now, summary)
        store.count_rescues(actions)
    return moved


class Rescuer(Service):
    """Runs whenever the pass's survey saw a stale claim."""

    name = "rescuer"
    interval = 0.0

    def is_due(self, survey: Survey) -> bool:
        return survey.stale

    def run_once(self, now: datetime) -> int:
        self.said = rescue(now)
        return self.said.total()
