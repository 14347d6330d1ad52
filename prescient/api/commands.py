"""The JSON API's commands to one job: pause, release, run now, sleep, cancel and kill; and
running a finished job again (``POST history/{id}/rerun``).

Each is a small view over one verb of :mod:`prescient.engine.verbs`, registered on the API of
:mod:`.views`: parse, authorise (the change permission and the token's scope), call, answer.
A refused move is a 409, an unknown id a 404, a bad time a 400.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Status

from ..engine import verbs
from ..exceptions import InvalidTime, RerunRefused
from ..models import JobHistory
from .auth import ADD, CHANGE, caller, needs
from .errors import ApiError, invalid, not_found
from .payloads import MAX_ID, task_out
from .schemas import KillIn, KillOut, SleepIn, Task
from .views import EARLIEST, _errors, _fresh, _job, _scoped, api, job_route

logger = logging.getLogger(__name__)


@job_route(
    "post", "/{job_id}/pause",
    auth=needs(CHANGE),
    response={200: Task, **_errors(400, 401, 403, 404, 409, 503)},
    operation_id="pause_task",
    summary="Pause a job",
)
def pause_task(request: HttpRequest, job_id: int) -> Any:
    """A scheduled job is no longer claimed; a running one finishes its run and stays paused.
    Pausing a paused job changes nothing; a buried job cannot be paused (409)."""
    job = _job(caller(request), job_id)
    verbs.pause(job=job.pk)
    return task_out(_fresh(job.pk))


@job_route(
    "post", "/{job_id}/release",
    auth=needs(CHANGE),
    response={200: Task, **_errors(400, 401, 403, 404, 409, 503)},
    operation_id="release_task",
    summary="Release a paused job",
)
def release_task(request: HttpRequest, job_id: int) -> Any:
    """Back to the state it was paused in. Releasing a job that is not paused changes nothing;
    a buried job cannot be released (409)."""
    job = _job(caller(request), job_id)
    verbs.release(job=job.pk)
    return task_out(_fresh(job.pk))


@job_route(
    "post", "/{job_id}/run",
    auth=needs(CHANGE),
    response={200: Task, **_errors(400, 401, 403, 404, 409, 503)},
    operation_id="run_task",
    summary="Make a job due now",
)
def run_task(request: HttpRequest, job_id: int) -> Any:
    """A scheduled or buried job becomes due at once (the next tick runs it); a paused one is
    released and due at once (one paused while its run was in flight goes back to running).
    409 for a running job."""
    job = _job(caller(request), job_id)
    return task_out(verbs.run_now(job.pk))


@job_route(
    "post", "/{job_id}/kill",
    auth=needs(CHANGE),
    response={200: KillOut, **_errors(400, 401, 403, 404, 409, 503)},
    operation_id="kill_task",
    summary="End a job, with a reason",
)
def kill_task(request: HttpRequest, job_id: int, payload: KillIn) -> Any:
    """The job ends with outcome ``killed``. A job whose run is in flight ends when the run
    returns (``result: requested``)."""
    principal = caller(request)
    job = _job(principal, job_id)
    result = verbs.kill(job.pk, payload.reason)
    logger.info("api: job id=%s kill %s by user=%s", job.pk, result, principal.user.pk)
    return {"id": job.pk, "result": result}


@job_route(
    "post", "/{job_id}/sleep",
    auth=needs(CHANGE),
    response={200: Task, **_errors(400, 401, 403, 404, 409, 503)},
    operation_id="sleep_task",
    summary="Move a job's next check to a time",
)
def sleep_task(request: HttpRequest, job_id: int, payload: SleepIn) -> Any:
    """The job is next due at ``at``, rounded up to a slot; a paused job stays paused. A job
    whose run is in flight is asked to stop; when the run returns its result is discarded and
    the job is due at ``at`` (until then the answer still shows the run)."""
    principal = caller(request)
    job = _job(principal, job_id)
    now = timezone.now()
    if payload.at < now - EARLIEST:
        raise invalid("at", f"{payload.at.isoformat()} is more than a day in the past.")
    try:
        verbs.sleep(job.pk, payload.at, now=now)
    except (InvalidTime, OverflowError) as exc:
        raise invalid("at", str(exc) if isinstance(exc, InvalidTime) else "The time is out of range.") from None
    logger.info("api: job id=%s sleep until %s by user=%s", job.pk, payload.at.isoformat(), principal.user.pk)
    return task_out(_fresh(job.pk))


@job_route(
    "post", "/{job_id}/cancel",
    auth=needs(CHANGE),
    response={200: KillOut, **_errors(400, 401, 403, 404, 409, 503)},
    operation_id="cancel_task",
    summary="End a job as not needed",
)
def cancel_task(request: HttpRequest, job_id: int) -> Any:
    """The job ends with outcome ``cancelled`` (as ``prescient.cancel`` does). A job whose run
    is in flight ends when the run returns (``result: requested``)."""
    principal = caller(request)
    job = _job(principal, job_id)
    result = verbs.cancel_job(job.pk)
    logger.info("api: job id=%s cancel %s by user=%s", job.pk, result, principal.user.pk)
    return {"id": job.pk, "result": result}


@api.post(
    "history/{history_id}/rerun",
    auth=needs(ADD),
    response={201: Task, **_errors(400, 401, 403, 404, 409, 503)},
    tags=["history"],
    operation_id="rerun_history",
    summary="Run a finished job again",
)
def rerun_history(request: HttpRequest, history_id: int) -> Any:
    """201 with a new live job of the same check and entity, due now, its ``rerun_of`` this
    entry's id. 409, nothing written, while a live job of that check and entity exists, when
    the check is no longer registered, or for an expectation (expect it again instead)."""
    principal = caller(request)
    row = None
    if 1 <= history_id <= MAX_ID:
        row = _scoped(JobHistory.objects.filter(pk=history_id), principal).first()
    if row is None:
        raise not_found(f"No history entry with id {history_id}.")
    try:
        job = verbs.rerun(row)
    except RerunRefused as exc:
        raise ApiError(409, str(exc)) from None
    logger.info("api: history id=%s run again as job id=%s by user=%s", row.pk, job.pk, principal.user.pk)
    return Status(201, task_out(job))
