"""A task job as django.tasks reports it: its attempts and run times, its errors as TaskErrors,
and the :class:`~django.tasks.TaskResult` of a job or of its history row.

A task's attempts and run times live in its ``payload``, all by the database's clock:

- ``worker_ids``: one per attempt, the token of the claim that ran it;
- ``started_at``: the ``run_started_at`` of its first run (written by the statement that
  started that run), ``last_attempted_at`` that of its last run;
- ``finished_at``: when its last run ended, that run's start plus the run's time as the process
  that ran it measured it, so that ``started_at <= finished_at`` whatever that host's clock says.

A job whose run is in flight shows that run as its row says (:func:`result_of`), before the run
itself writes anything.
"""

from __future__ import annotations

import traceback as tb
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError

from prescient.cleaning import clean_text
from prescient.engine.decisions import RUN_FAILED, Decision
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome

if TYPE_CHECKING:
    _P = ParamSpec("_P")
    _R = TypeVar("_R")


# --- attempts and run times ----------------------------------------------------------------------


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _attempted(payload: dict[str, Any], token: str, at: datetime | None) -> dict[str, Any]:
    """``payload`` with the run started ``at`` under the claim ``token`` counted as an attempt,
    once (the claim's token is the attempt's worker id): among ``worker_ids``, as
    ``last_attempted_at``, and as ``started_at`` when it is the first."""
    ids = list(payload.get("worker_ids") or [])
    if not token or at is None or (ids and ids[-1] == token):
        return payload
    stamp = at.isoformat()
    return {
        **payload, "worker_ids": [*ids, token], "last_attempted_at": stamp,
        "started_at": payload.get("started_at") or stamp,
    }


def note_attempt(job: FutureJob, at: datetime) -> None:
    """Count the run of ``job`` that started ``at`` (its ``run_started_at``) as an attempt."""
    job.payload = _attempted(dict(job.payload or {}), job.reserved_by, at)


def note_end(job: FutureJob, at: datetime) -> None:
    """Note that the last run of ``job`` ended ``at`` (by the database's clock)."""
    job.payload = {**(job.payload or {}), "finished_at": at.isoformat()}


def _finished_at(row: FutureJob | JobHistory, payload: dict[str, Any]) -> datetime | None:
    """When the task of ``row`` finished: when its last run ended, for a task its run ended
    (``completed``, ``failed``); for one ended otherwise (killed, cancelled: maybe between
    runs), when it was ended, and never before its last run ended."""
    ended = _when(payload.get("finished_at"))
    if not isinstance(row, JobHistory):
        return ended
    if ended is None:
        return row.finished_at
    if row.outcome in (Outcome.COMPLETED, Outcome.FAILED):
        return ended
    return max(ended, row.finished_at)


# --- errors --------------------------------------------------------------------------------------


def detail_error(job: FutureJob, exception_path: str, traceback: str) -> None:
    """Give the error just recorded on ``job`` the shape of a django.tasks TaskError, from the
    failure's data (see :func:`prescient.engine.decisions.failure`)."""
    if job.recent_errors and isinstance(job.recent_errors[-1], dict):
        last = job.recent_errors[-1]
        job.recent_errors[-1] = {
            **last, "exception_class_path": clean_text(exception_path or RUN_FAILED, 300),
            "traceback": clean_text(traceback) if traceback else last.get("error", ""),
        }


def traceback_text(decision: Decision) -> str:
    """The traceback of a failed run as a TaskError gives it: whole, as formatted when the run
    raised; for a failure nothing raised in the task's own frames (a lost worker, a process
    that died), the error as a traceback's last line; for a run stopped at its timeout, where it
    was stopped, then that line."""
    if decision.traceback:
        return decision.traceback
    exc = decision.exception
    name = type(exc).__name__ if exc is not None else ""
    last = decision.error if not name or decision.error.startswith(name) else f"{name}: {decision.error}"
    frames = tb.format_tb(exc.__traceback__) if exc is not None and exc.__traceback__ is not None else []
    head = "Traceback (most recent call last):\n" if frames else ""
    return clean_text(head + "".join(frames) + last + "\n")


def task_errors(entries: list[Any]) -> list[TaskError]:
    """The TaskErrors of a job's recent errors (or of its history row's errors)."""
    errors = []
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        errors.append(
            TaskError(
                # As the failed run recorded it (detail_error); never guessed from the text.
                exception_class_path=entry.get("exception_class_path") or RUN_FAILED,
                traceback=entry.get("traceback") or str(entry.get("error", "")),
            )
        )
    return errors


# --- the result ----------------------------------------------------------------------------------


def result_of(row: FutureJob | JobHistory, task: Task[_P, _R], status: TaskResultStatus) -> TaskResult[_P, _R]:
    """The django.tasks TaskResult of a job or history row.

    A job whose run is in flight (``RUNNING``) shows that run as its row says, from the moment
    the statement that started it was written, before the run itself writes anything: its
    ``run_started_at`` is the attempt's start, its claim (``reserved_by``) its worker id. Nothing
    is written for it, so a job of another kind pays nothing for it.
    """
    payload = row.payload if isinstance(row.payload, dict) else {}
    if status == TaskResultStatus.RUNNING and isinstance(row, FutureJob):
        payload = _attempted(payload, row.reserved_by, row.run_started_at)
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    result: TaskResult[_P, _R] = TaskResult(
        task=task,
        id=str(row.job_id if isinstance(row, JobHistory) else row.pk),
        status=status,
        enqueued_at=row.created_at,
        started_at=_when(payload.get("started_at")),
        finished_at=_finished_at(row, payload) if finished else None,
        last_attempted_at=_when(payload.get("last_attempted_at")),
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=payload.get("backend", task.backend),
        errors=task_errors(row.errors if isinstance(row, JobHistory) else row.recent_errors),
        worker_ids=list(payload.get("worker_ids", [])),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", payload.get("return_value"))
    return result
