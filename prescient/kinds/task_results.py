"""A task job as django.tasks reports it: its attempts (kept in its payload), its errors as
TaskErrors, and the :class:`~django.tasks.TaskResult` of a job or of its history row."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError

from prescient.cleaning import clean_text
from prescient.engine.decisions import RUN_FAILED
from prescient.models import FutureJob, JobHistory

if TYPE_CHECKING:
    _P = ParamSpec("_P")
    _R = TypeVar("_R")


# --- attempts ------------------------------------------------------------------------------------


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def note_attempt(job: FutureJob, at: datetime) -> None:
    """Count one attempt per claim: the claim's token is the worker id of the attempt."""
    payload = dict(job.payload or {})
    ids = list(payload.get("worker_ids", []))
    if job.reserved_by and (not ids or ids[-1] != job.reserved_by):
        ids.append(job.reserved_by)
        payload["last_attempted_at"] = at.isoformat()
        payload["started_at"] = payload.get("started_at") or at.isoformat()
    payload["worker_ids"] = ids
    job.payload = payload


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
    """The django.tasks TaskResult of a job or history row."""
    payload = row.payload or {}
    result: TaskResult[_P, _R] = TaskResult(
        task=task,
        id=str(row.job_id if isinstance(row, JobHistory) else row.pk),
        status=status,
        enqueued_at=row.created_at,
        started_at=_when(payload.get("started_at")),
        finished_at=row.finished_at if isinstance(row, JobHistory) else None,
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
