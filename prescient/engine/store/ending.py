"""Ending jobs: the history row written and the live row deleted, in the caller's transaction;
then the jobs that waited on them moved on, in that same transaction (see :mod:`.links`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import F, QuerySet

from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome

from .. import bulk
from . import events, links
from .tallies import count_endings
from .wake import notify

logger = logging.getLogger("prescient.engine")


def _insert_history(rows: list[JobHistory]) -> None:
    """Insert the history rows of jobs that end, count their outcomes for the metrics, and
    announce them once the transaction commits (:mod:`prescient.signals`)."""
    if rows:
        fields = bulk.insert_fields(JobHistory)
        bulk.insert_rows(JobHistory, bulk.prep_all(rows, fields, add=True), fields)
        count_endings(rows)
        events.announce(rows)


def end_jobs(
    ended: Sequence[tuple[FutureJob, str]], now: datetime, extra: Mapping[int, Mapping[str, Any]] | None = None
) -> list[JobHistory]:
    """End each ``(job, outcome)``: its one history row written, its live row deleted, the jobs
    waiting on it moved on (call in a transaction, with the jobs locked: their ``has_dependants``
    as stored says whether any may wait on them). ``extra``: fields of
    some history rows, by job id (why a run ended its job). Returns the history rows."""
    extra = extra or {}
    rows = [JobHistory.from_job(job, outcome, now, **extra.get(job.pk, {})) for job, outcome in ended]
    _insert_history(rows)
    bulk.delete_rows(FutureJob, [job.pk for job, _ in ended])
    release_waiters([job.pk for job, _ in ended if job.has_dependants], now)
    return rows


def end_job(job: FutureJob, outcome: str, now: datetime) -> JobHistory:
    """End one locked job with ``outcome`` (see :func:`end_jobs`)."""
    row = end_jobs([(job, outcome)], now)[0]
    logger.info(
        "job id=%s %s=%s entity=%s:%s ended outcome=%s",
        job.pk, job.kind or "check", job.job_exec, job.entity_name, job.entity_key, outcome,
    )
    return row


def release_waiters(parent_pks: Sequence[int], now: datetime) -> int:
    """Move on the waiting children of ``parent_pks``, which have just ended in the caller's
    transaction; returns how many children moved or ended. Give only jobs that have dependants
    (``has_dependants``): the others have no waiters to look for."""
    if not parent_pks:
        return 0
    return resolve_waiting(links.waiting_children(parent_pks), now)


def resolve_waiting(jobs: QuerySet[FutureJob], now: datetime, limit: int | None = None) -> int:
    """Judge the waiting jobs among ``jobs`` (up to ``limit``) by their parents as they are now:
    cancel those a failed parent cancels (their own waiters follow), unblock those whose
    parents have all ended; returns how many moved or ended."""
    pks = links.lock_waiting(jobs, limit)
    if not pks:
        return 0
    cancel, unblock = links.triage(pks)
    if cancel:
        doomed = list(FutureJob.objects.filter(bulk.AnyOf(F("pk"), list(cancel))).order_by("pk"))
        for job in doomed:
            job.end_reason = cancel[job.pk]
            logger.info("job id=%s cancelled: %s", job.pk, job.end_reason)
        end_jobs([(job, Outcome.CANCELLED) for job in doomed], now)
    moved, scheduled = links.unblock(unblock)
    if moved:
        logger.info("unblocked %s waiting job(s)", moved)
    if scheduled:
        notify()  # unblocked jobs may be due already
    return len(cancel) + moved
