"""Ending jobs: the history row written and the live row deleted, in the caller's transaction."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from prescient.models import FutureJob, JobHistory

from .. import bulk

logger = logging.getLogger("prescient.engine")


def _insert_history(rows: list[JobHistory]) -> None:
    if rows:
        fields = bulk.insert_fields(JobHistory)
        bulk.insert_rows(JobHistory, bulk.prep_all(rows, fields, add=True), fields)


def end_jobs(ended: Sequence[tuple[FutureJob, str]], now: datetime) -> list[JobHistory]:
    """End each ``(job, outcome)``: its one history row written, its live row deleted (call in
    a transaction, with the jobs locked). Returns the history rows."""
    rows = [JobHistory.from_job(job, outcome, now) for job, outcome in ended]
    _insert_history(rows)
    bulk.delete_rows(FutureJob, [job.pk for job, _ in ended])
    return rows


def end_job(job: FutureJob, outcome: str, now: datetime) -> JobHistory:
    """End one locked job with ``outcome`` (see :func:`end_jobs`)."""
    row = end_jobs([(job, outcome)], now)[0]
    logger.info(
        "job id=%s check=%s entity=%s#%s ended outcome=%s",
        job.pk, job.job_exec, job.entity_name, job.entity_key, outcome,
    )
    return row


