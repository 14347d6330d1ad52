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
from collections import Counter
from datetime import datetime, timedelta

from django.db import models, transaction

from prescient import states
from prescient.conf import setting, stale_after_seconds
from prescient.engine import store
from prescient.engine.decisions import BURIED, ENDED, HANDED_BACK, RECLAIMED, SLEPT, record_error
from prescient.engine.kind import get_kind
from prescient.engine.sweep import WORKER_TOKEN_PREFIX, Survey, definition_of, lease_seconds
from prescient.exceptions import PrescientError
from prescient.models import FutureJob
from prescient.states import Event, Outcome

from . import Service

logger = logging.getLogger(__name__)


def stale(cutoff: datetime) -> models.QuerySet[FutureJob]:
    """Claims older than ``cutoff`` in a state the rescuer may move."""
    return (
        FutureJob.objects.in_flight()
        .filter(reserved_at__lt=cutoff, state__in=states.states_with(Event.BURY))
        .order_by()
    )


def reclaim(job: FutureJob, now: datetime) -> str:
    """A lost worker's claim (``job`` locked): a failed run, due again at once (``reclaimed``),
    or past its retries ended ``failed`` (``ended``)."""
    job.failure_count += 1
    try:
        get_kind(job.kind).after_lost_run(job, now)
    except PrescientError:
        pass
    definition = definition_of(job)
    retries = definition.retries_allowed if definition is not None else int(setting("MAX_RETRIES"))
    if job.failure_count > retries:
        states.target(job, Event.FINISH)
        store.end_job(job, Outcome.FAILED, now)
        store.count_rescue(job, "failed")
        logger.warning("job id=%s failed: its worker was lost too often", job.pk)
        return ENDED
    store.clear_reservation(job, states.target(job, Event.RECLAIM))
    store.count_rescue(job, "reclaimed")
    logger.warning("job id=%s reclaimed from a lost worker; due again", job.pk)
    return RECLAIMED


def rescue(now: datetime) -> Counter[str]:
    """Deal with every stale claim; returns how many jobs were ``reclaimed``, ``handed_back``,
    ``buried``, ``slept`` and ``ended`` (only the keys that happened).

    A claim is stale when its lease (see :func:`~prescient.engine.sweep.lease_seconds`) ran
    out by the database's clock; ``now`` only dates what is written (errors, history rows), so
    a replay's ``now`` cannot take a live claim away. A claim whose run never started is handed
    back, with no failure counted.
    """
    clock = store.db_now()
    cutoff = clock - timedelta(seconds=stale_after_seconds())
    moved: Counter[str] = Counter()
    for pk in list(stale(cutoff).values_list("pk", flat=True)):
        with transaction.atomic():
            job = FutureJob.objects.select_for_update().filter(pk=pk).first()
            if job is None or not job.in_flight or job.reserved_at is None:
                continue
            if job.reserved_at >= clock - timedelta(seconds=lease_seconds(job)):
                continue  # a long-running job's own lease has not run out
            if job.run_started_at is None and not job.end_requested:
                store.clear_reservation(job, states.target(job, Event.HAND_BACK))
                store.count_rescue(job, "handed_back")
                moved[HANDED_BACK] += 1
                logger.warning("job id=%s handed back: its claim %s went stale before it started", pk, job.reserved_by)
                continue
            error = f"worker lost: reservation {job.reserved_by} from {job.reserved_at.isoformat()} went stale"
            record_error(job, error, now)
            if job.end_requested:
                states.target(job, Event.FINISH)
                store.end_job(job, job.end_requested, now)
                store.count_rescue(job, "ended")
                moved[ENDED] += 1
                logger.warning("job id=%s ended %s: %s", job.pk, job.end_requested, error)
                continue
            if job.sleep_until is not None:  # slept during the lost run: due when asked
                job.next_check_at = job.sleep_until
                store.clear_reservation(job, states.target(job, Event.SLEEP))
                store.count_rescue(job, "slept")
                moved[SLEPT] += 1
                logger.warning("job id=%s slept: %s", job.pk, error)
                continue
            if job.reserved_by.startswith(WORKER_TOKEN_PREFIX):
                moved[reclaim(job, now)] += 1
                continue
            store.clear_reservation(job, states.target(job, Event.BURY))
            store.count_rescue(job, "buried")
            moved[BURIED] += 1
            logger.warning("job id=%s buried: %s", job.pk, error)
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
