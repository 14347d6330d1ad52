"""Running a finished job again (``prescient.rerun``): a new live job for the same check and
entity, its payload, workflow, queue and priority kept, due now, its counters at zero.

The new job's ``rerun_of`` names the history row it came from, and its own history row keeps
it when it ends: the old row's re-runs are the rows (and the live job) that name it, so nothing
is written to the old row (history is a record). Each kind says how one of its jobs is made
again (:meth:`~prescient.engine.kind.JobKind.rerun_job`): a check copies its row, a task is
enqueued again with its arguments, an expectation refuses (its ladder is fixed when it starts).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction

from prescient.exceptions import HistoryNotFound, PrescientError, RerunRefused
from prescient.models import FutureJob, JobHistory

from . import store
from .kind import get_kind
from .store import notify
from .targets import _now

logger = logging.getLogger("prescient.engine.verbs")


def history_row(row: JobHistory | int) -> JobHistory:
    """The history row ``row`` (or its id); :class:`HistoryNotFound` if there is none."""
    if isinstance(row, JobHistory):
        return row
    found = JobHistory.objects.filter(pk=row).first() if isinstance(row, int) else None
    if found is None:
        raise HistoryNotFound(row)
    return found


def live_clash(row: JobHistory) -> int | None:
    """The id of the live job of ``row``'s check and entity, if there is one (a re-run would clash)."""
    return (
        FutureJob.objects.filter(entity_name=row.entity_name, entity_key=row.entity_key, job_exec=row.job_exec)
        .values_list("pk", flat=True)
        .first()
    )


def preview(row: JobHistory, now: datetime) -> None:
    """Raise :class:`RerunRefused` as :func:`rerun` would for ``row``, writing nothing (dry runs)."""
    live = live_clash(row)
    if live is not None:
        raise RerunRefused(row.pk, _clash_reason(live))
    try:
        get_kind(row.kind).rerun_job(row, now, paused=False)  # an unsaved job, dropped
    except RerunRefused:
        raise
    except PrescientError as exc:
        raise RerunRefused(row.pk, str(exc)) from None


def rerun(row: JobHistory | int, *, now: datetime | None = None) -> FutureJob:
    """Run a finished job again: a new live job, due now, for the same check and entity (its
    payload, workflow, queue and priority kept; no parents; paused if its workflow is), whose
    ``rerun_of`` is the history row's id. Any outcome may be run again.

    Raises :class:`HistoryNotFound` for an unknown row, and :class:`RerunRefused`, writing
    nothing, when a live job of that check and entity exists (one pending job per entity and
    check: cancel it, or run it now), when the check is no longer registered, or when the
    job's kind cannot be run again (an expectation: expect it again instead).
    """
    row = history_row(row)
    now = _now(now)
    live = live_clash(row)
    if live is not None:
        raise RerunRefused(row.pk, _clash_reason(live))
    with transaction.atomic():
        paused = bool(row.workflow) and store.lock_workflow(row.workflow)
        try:
            job = get_kind(row.kind).rerun_job(row, now, paused=paused)
        except RerunRefused:
            raise
        except PrescientError as exc:  # its kind or check is unknown now
            raise RerunRefused(row.pk, str(exc)) from None
        job.rerun_of = row.pk
        try:
            store.insert(job)  # in a savepoint: a clash leaves the caller's transaction usable
        except IntegrityError:
            live = live_clash(row)
            if live is None:  # the clash was not the one-pending-job rule
                raise
            raise RerunRefused(row.pk, _clash_reason(live)) from None
        if not paused:
            notify()  # due now: wake a worker rather than wait for the next slot
    logger.info("history row id=%s (%s) run again as job id=%s", row.pk, row.job_exec, job.pk)
    return job


def _clash_reason(live: int) -> str:
    return (
        f"job {live} of this check for this entity is live (one pending job per entity and check); "
        "cancel it or make it due now instead"
    )
