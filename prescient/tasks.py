"""prescient as a django.tasks backend (Django 6.0 or later).

    TASKS = {"default": {"BACKEND": "prescient.tasks.PrescientBackend", "QUEUES": ["default"]}}

A task enqueued here is a prescient job about no entity (``entity_name`` is
:data:`~prescient.registry.TASK_ENTITY`) whose check is ``task:<module path>``: the worker
claims, runs, times out, retries and recovers it like any check. Its arguments, queue and
priority travel with the job; :class:`~django.tasks.TaskResult.id` is the job's id, which its
history row keeps once it has ended.

Nothing is imported from a string kept in the database: a task is known to the worker because
its module was imported (``<app>/tasks.py`` modules are autodiscovered when a
``PrescientBackend`` is configured), which registers it when ``@task`` creates it.
"""

from __future__ import annotations

import django
from django.core.exceptions import ImproperlyConfigured

try:
    from django.tasks.backends.base import BaseTaskBackend
except ImportError as exc:  # Django 5.2: no django.tasks
    raise ImproperlyConfigured(
        "prescient.tasks.PrescientBackend needs Django 6.0 or later (django.tasks); "
        f"this is Django {django.get_version()}. Everything else in prescient works without it."
    ) from exc

import dataclasses
import json
import logging
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules

from . import registry, runner, slots
from .conf import setting
from .registry import TASK_ENTITY, Check
from .states import Event, Outcome, State

if TYPE_CHECKING:
    from .models import FutureJob, JobHistory
    from .scheduler import Decision

logger = logging.getLogger(__name__)

BACKEND_PATH = "prescient.tasks.PrescientBackend"
#: Prefix of the check name of a task job: ``task:<module path>``.
CHECK_PREFIX = "task:"

#: Every task created with a PrescientBackend, by module path (the first one of each path).
_tasks: dict[str, Task] = {}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PrescientTask(Task):
    """A Task that may carry its own retries and timeout: ``@task(max_retries=5, timeout_seconds=30)``.

    Unset, they come from the backend's OPTIONS (``MAX_RETRIES``, ``TIMEOUT_SECONDS``), then
    from the ``PRESCIENT`` settings.
    """

    max_retries: int | None = None
    timeout_seconds: float | None = None


def _clone(task: Task, **changes: Any) -> Task:
    """A copy of ``task`` with ``changes``, made without validating it again."""
    clone = object.__new__(type(task))
    for f in dataclasses.fields(task):
        object.__setattr__(clone, f.name, changes.get(f.name, getattr(task, f.name)))
    return clone


def _json(value: Any) -> Any:
    """``value`` as it comes back from JSON; TypeError or ValueError if it does not fit."""
    return json.loads(json.dumps(normalize_json(value), allow_nan=False))


def configured() -> bool:
    """Whether the ``TASKS`` setting uses a PrescientBackend."""
    backends = getattr(settings, "TASKS", None) or {}
    return any(isinstance(cfg, dict) and cfg.get("BACKEND") == BACKEND_PATH for cfg in backends.values())


def discover() -> None:
    """Import every installed app's ``tasks`` module, so its tasks are registered."""
    autodiscover_modules("tasks")


class PrescientBackend(BaseTaskBackend):
    """django.tasks backend storing each task as a prescient job, run by ``prescient_worker``.

    OPTIONS: ``MAX_RETRIES`` and ``TIMEOUT_SECONDS`` (defaults for tasks that set none),
    ``RETRY_DELAY_SECONDS`` (a failed run is retried that long after it failed; default 0),
    ``ROUND_TO_SLOT`` (round ``run_after`` up to prescient's slot; default False).
    """

    task_class = PrescientTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        """Django's checks, ``run_after`` also as a timedelta, then register the task."""
        run_after = task.run_after
        if isinstance(run_after, timedelta):
            super().validate_task(_clone(task, run_after=None))
        elif run_after is not None and not isinstance(run_after, datetime):
            raise InvalidTask("run_after must be an aware datetime or a timedelta.")
        else:
            super().validate_task(task)
        if task.queue_name == "":
            raise InvalidTask("queue_name must not be empty: '' is the queue of prescient's checks.")
        max_retries = getattr(task, "max_retries", None)
        if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
            raise InvalidTask("max_retries must be a whole number of at least 0.")
        timeout = getattr(task, "timeout_seconds", None)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise InvalidTask("timeout_seconds must be a positive number.")
        self._register(task)

    def _register(self, task: Task) -> None:
        path = task.module_path
        known = _tasks.get(path)
        if known is not None and known.func is task.func:
            return
        _tasks[path] = task
        max_retries = getattr(task, "max_retries", None)
        timeout = getattr(task, "timeout_seconds", None)
        registry.add(
            Check(
                name=CHECK_PREFIX + path,
                func=_invoke,
                model_label=TASK_ENTITY,  # no model has this label: schedule() refuses it
                timeout_seconds=timeout if timeout is not None else self.options.get("TIMEOUT_SECONDS"),
                max_retries=max_retries if max_retries is not None else self.options.get("MAX_RETRIES"),
                options={"task": task, "backend": self.alias, "retry_delay": self.options.get("RETRY_DELAY_SECONDS", 0)},
            )
        )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Store ``task`` as a job, in the caller's transaction if there is one.

        Called inside ``transaction.atomic()``, the job exists only if that transaction
        commits (and the worker is woken only then, on PostgreSQL).
        """
        from .models import FutureJob
        from .notify import notify

        self.validate_task(task)
        now = timezone.now()
        run_after = task.run_after
        if isinstance(run_after, timedelta):
            due = now + run_after
        elif run_after is not None:
            due = run_after
        else:
            due = now
        if self.options.get("ROUND_TO_SLOT"):
            due = slots.round_up(due, int(setting("SLOT_MINUTES")))
        try:
            args, kwargs = _json(list(args)), _json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"The arguments of task {task.module_path} must be JSON: {exc}") from exc
        job = FutureJob(
            entity_name=TASK_ENTITY,
            entity_key=uuid.uuid4().hex,
            job_exec=CHECK_PREFIX + task.module_path,
            state=State.SCHEDULED,
            first_check_at=due,
            next_check_at=due,
            created_at=now,
            queue=task.queue_name,
            priority=task.priority,
            payload={
                "args": args,
                "kwargs": kwargs,
                "takes_context": task.takes_context,
                "backend": self.alias,
                "run_after": None if run_after is None else due.isoformat(),
                "worker_ids": [],
                "started_at": None,
                "last_attempted_at": None,
            },
        )
        with transaction.atomic():
            job.save(force_insert=True)
            # Delivered when the caller's transaction commits. Sent for a deferred task too, so
            # that an idle worker sets its next wake-up to the task's exact run_after.
            notify()
        result = _result(job, task, TaskResultStatus.READY)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        from .models import FutureJob, JobHistory

        try:
            pk = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        job = FutureJob.objects.filter(pk=pk, entity_name=TASK_ENTITY).first()
        if job is not None:
            status = TaskResultStatus.RUNNING if job.reserved_by else TaskResultStatus.READY
            return _result(job, _task_of(job), status)
        row = JobHistory.objects.filter(job_id=pk, entity_name=TASK_ENTITY).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        status = TaskResultStatus.SUCCESSFUL if row.outcome == Outcome.COMPLETED else TaskResultStatus.FAILED
        return _result(row, _task_of(row), status)


def _task_of(row: FutureJob | JobHistory) -> Task:
    """The Task of a job or history row, as it was enqueued."""
    path = row.job_exec.removeprefix(CHECK_PREFIX)
    task = _tasks.get(path)
    if task is None:
        discover()
        task = _tasks.get(path)
    if task is None:
        raise TaskResultDoesNotExist(
            f"Result {row.pk} is of task {path}, which no imported module defines"
        )
    payload = row.payload or {}
    run_after = payload.get("run_after")
    return _clone(
        task,
        queue_name=row.queue,
        priority=row.priority,
        backend=payload.get("backend", task.backend),
        run_after=datetime.fromisoformat(run_after) if run_after else None,
    )


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _errors(entries: list[dict[str, Any]]) -> list[TaskError]:
    errors = []
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        errors.append(
            TaskError(
                exception_class_path=entry.get("exception_class_path") or _class_of(str(entry.get("error", ""))),
                traceback=entry.get("traceback") or str(entry.get("error", "")),
            )
        )
    return errors


def _class_of(error: str) -> str:
    """The exception class of an error prescient recorded without one (timeouts, lost runs)."""
    if error.startswith("CheckTimeout"):
        return "prescient.exceptions.CheckTimeout"
    if error.startswith("UnknownCheck"):
        return "prescient.exceptions.UnknownCheck"
    return "prescient.exceptions.RunFailed"


def _result(row: FutureJob | JobHistory, task: Task, status: str) -> TaskResult:
    from .models import JobHistory

    payload = row.payload or {}
    finished = isinstance(row, JobHistory)
    result = TaskResult(
        task=task,
        id=str(row.job_id if finished else row.pk),
        status=status,
        enqueued_at=row.created_at,
        started_at=_when(payload.get("started_at")),
        finished_at=row.finished_at if finished else None,
        last_attempted_at=_when(payload.get("last_attempted_at")),
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=payload.get("backend", task.backend),
        errors=_errors(row.errors if finished else row.recent_errors),
        worker_ids=list(payload.get("worker_ids", [])),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", payload.get("return_value"))
    return result


# --- running (called by prescient.scheduler) ----------------------------------------------------


def _invoke(task: Task, job: FutureJob) -> Any:
    payload = job.payload or {}
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if task.takes_context:
        context = TaskContext(task_result=_result(job, task, TaskResultStatus.RUNNING))
        return task.call(context, *args, **kwargs)
    return task.call(*args, **kwargs)


def _note_attempt(job: FutureJob, at: datetime) -> None:
    """Count one attempt per claim: the claim's token is the worker id of the attempt."""
    payload = dict(job.payload or {})
    ids = list(payload.get("worker_ids", []))
    if job.reserved_by and (not ids or ids[-1] != job.reserved_by):
        ids.append(job.reserved_by)
        payload["last_attempted_at"] = at.isoformat()
        payload["started_at"] = payload.get("started_at") or at.isoformat()
    payload["worker_ids"] = ids
    job.payload = payload


def _detail_error(job: FutureJob, exception_path: str, traceback: str) -> None:
    """Give the error just recorded on ``job`` the shape of a django.tasks TaskError."""
    if job.recent_errors and isinstance(job.recent_errors[-1], dict):
        job.recent_errors[-1] = {**job.recent_errors[-1], "exception_class_path": exception_path, "traceback": traceback}


def _retry_soon(decision: Decision, check: Check | None, now: datetime) -> None:
    """A task's retry is due at once (or after RETRY_DELAY_SECONDS), not at the next slot."""
    if decision.event != Event.RETRY:
        return
    delay = float((check.options.get("retry_delay") if check is not None else 0) or 0)
    # Strictly after ``now``, so that the tick which ran it does not run it again at once.
    decision.next_check_at = now + max(timedelta(seconds=delay), timedelta(microseconds=1))


def _finished(decision: Decision, task: Task | None) -> None:
    """Send task_finished for a run that ends its task (written when the batch settles)."""
    if decision.event != Event.FINISH or task is None:
        return
    status = TaskResultStatus.SUCCESSFUL if decision.outcome == Outcome.COMPLETED else TaskResultStatus.FAILED
    result = _result(decision.job, task, status)
    object.__setattr__(result, "finished_at", timezone.now())
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", (decision.job.payload or {}).get("return_value"))
    task_finished.send(PrescientBackend, task_result=result)


def run_task(job: FutureJob, check: Check, now: datetime) -> Decision:
    """Run the task of a claimed task job and decide what follows (see scheduler.run_one)."""
    from .scheduler import Decision, _failure

    task: Task = check.options["task"]
    _note_attempt(job, timezone.now())
    task_started.send(PrescientBackend, task_result=_result(job, task, TaskResultStatus.RUNNING))
    outcome = runner.call(_invoke, (task, job), check.timeout, f"{check.name}[{job.pk}]")
    decision = Decision(job=job, event=Event.FINISH, seconds=outcome.seconds, ran=True)
    if outcome.failed:
        decision = _failure(decision, check, outcome.error, now)
        _detail_error(job, outcome.exception_path or _class_of(outcome.error), outcome.traceback or outcome.error)
    else:
        try:
            value = _json(outcome.value)
        except (TypeError, ValueError) as exc:
            error = f"TypeError: task {task.module_path} returned a value that is not JSON ({exc})"
            decision = _failure(decision, check, error, now)
            _detail_error(job, "builtins.TypeError", error)
        else:
            job.payload = {**(job.payload or {}), "return_value": value}
            decision.outcome = Outcome.COMPLETED
    _retry_soon(decision, check, now)
    _finished(decision, task)
    return decision


def after_failed_run(decision: Decision, check: Check | None, now: datetime) -> None:
    """A task's run failed outside its code (its process died, or was killed on overrunning)."""
    job = decision.job
    _note_attempt(job, now)
    _detail_error(job, _class_of(decision.error), decision.error)
    _retry_soon(decision, check, now)
    _finished(decision, None if check is None else check.options.get("task"))


def note_lost_attempt(job: FutureJob, now: datetime) -> None:
    """A task's claim reclaimed from a lost worker: that attempt counts."""
    _note_attempt(job, now)
    _detail_error(job, "prescient.exceptions.RunFailed", job.last_error)


def retry(row: Any) -> TaskResult:
    """Enqueue a finished task again, with the arguments, queue and priority it had.

    ``row`` is its JobHistory row. The new job is a new result (a new id), due at once.
    """
    from .models import JobHistory

    if not isinstance(row, JobHistory) or row.entity_name != TASK_ENTITY:
        raise ValueError(f"{row} is not a task")
    task = _clone(_task_of(row), run_after=None)
    payload = row.payload or {}
    return task.get_backend().enqueue(task, payload.get("args", []), payload.get("kwargs", {}))
