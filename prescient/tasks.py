"""prescient as a django.tasks backend (Django 6.0 or later).

    TASKS = {"default": {"BACKEND": "prescient.tasks.PrescientBackend", "QUEUES": ["default"]}}

A task enqueued here is a prescient job of kind ``task`` (:mod:`prescient.kinds.tasks`): the
worker claims, runs, times out, retries and recovers it like any job. Its arguments, queue and
priority travel with the job; :class:`~django.tasks.TaskResult.id` is the job's id, which its
history row keeps once it has ended. This module is only the face Django talks to.

A task is known to the worker because its module was imported (``<app>/tasks.py`` modules are
autodiscovered when a ``PrescientBackend`` is configured), or, for a task defined elsewhere in
an installed app, because its module is imported on demand; nothing outside the installed
apps is ever imported from a string kept in the database.

Django creates the backend, and asks its :meth:`~PrescientBackend.check`, whether or not
``prescient`` is an installed app, and prescient's models (which the task kind and the store
use) cannot even be imported when it is not. So this module imports them only where a method
needs them, once the app is known to be installed: a missing app is then ``prescient.E023``
from ``manage.py check`` and ImproperlyConfigured at the first enqueue, not a RuntimeError
from wherever the backend was first touched.
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
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage
from django.db import transaction
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from prescient import diagnostics, limits, slots
from prescient.conf import BACKEND_PATH, setting, validate_options
from prescient.states import Outcome, State

if TYPE_CHECKING:
    from prescient.engine.dependencies import ParentRef
    from prescient.kinds.tasks import AnyResult, AnyTask
    from prescient.models import FutureJob, JobHistory

    _TaskBase = AnyTask
    _P = ParamSpec("_P")
    _R = TypeVar("_R")
else:
    _TaskBase = Task

__all__ = ["BACKEND_PATH", "PrescientBackend", "PrescientTask", "configured", "discover", "enqueue_after", "retry"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PrescientTask(_TaskBase):
    """A Task that may carry its own retries and timeout: ``@task(max_retries=5, timeout_seconds=30)``.

    Unset, they come from the backend's OPTIONS (``MAX_RETRIES``, ``TIMEOUT_SECONDS``), then
    from the ``PRESCIENT`` settings.
    """

    max_retries: int | None = None
    timeout_seconds: float | None = None


#: What a PrescientBackend says when prescient is not an installed app.
APP_MISSING = (
    "TASKS[{alias!r}] is prescient's backend, but 'prescient' is not in INSTALLED_APPS: its tasks are "
    "prescient jobs, kept in prescient's tables"
)


def discover() -> None:
    """Import every installed app's ``tasks`` module, so its tasks are registered."""
    from prescient.kinds.tasks import discover as discover_tasks  # see the module's docstring

    discover_tasks()


def configured() -> bool:
    """Whether the ``TASKS`` setting uses a PrescientBackend."""
    backends = getattr(settings, "TASKS", None) or {}
    return any(isinstance(cfg, dict) and cfg.get("BACKEND") == BACKEND_PATH for cfg in backends.values())


class PrescientBackend(BaseTaskBackend):
    """django.tasks backend storing each task as a prescient job, run by ``prescient_worker``.

    OPTIONS: ``MAX_RETRIES`` and ``TIMEOUT_SECONDS`` (defaults for tasks that set none),
    ``RETRY_DELAY_SECONDS`` (a failed run is retried that long after it failed; default 0),
    ``ROUND_TO_SLOT`` (round ``run_after`` up to prescient's slot; default False).
    ``manage.py check`` validates them.
    """

    task_class = PrescientTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    #: Tells prescient's task kind that a task using this backend may be run by its workers.
    is_prescient = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Created at the first use of the backend: a bad OPTION stops it there, checks run or not.
        validate_options(alias, self.options)
        #: Limits and rates per task path or queue (OPTIONS["LIMITS"]), declared for every
        #: process that creates the backend (a worker's claim asks them of the database).
        self.limits = limits.task_limits(self.options)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """``prescient.E023`` when prescient is not an installed app (its OPTIONS are checked
        with prescient's own checks, which only an installed app registers)."""
        errors = list(super().check(**kwargs))
        if not apps.is_installed("prescient"):
            errors.append(diagnostics.TASKS_APP_MISSING(
                APP_MISSING.format(alias=self.alias), hint="Add 'prescient' to INSTALLED_APPS, then run migrate."
            ))
        return errors

    def _require_app(self) -> None:
        if not apps.is_installed("prescient"):
            raise ImproperlyConfigured(APP_MISSING.format(alias=self.alias))

    def validate_task(self, task: AnyTask) -> None:
        """Django's checks, ``run_after`` also as a timedelta, then register the task."""
        if not apps.is_installed("prescient"):
            # Django's checks only, so that a module of tasks still imports and check() can say
            # what is missing; the first enqueue raises it.
            if not isinstance(task.run_after, timedelta):
                super().validate_task(task)
            return
        from prescient.kinds import tasks as kind  # see the module's docstring

        run_after = cast("datetime | timedelta | None", task.run_after)  # a timedelta too, here
        if isinstance(run_after, timedelta):
            super().validate_task(kind.clone(task, run_after=None))
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
        kind.register_task(task, self.alias, self.options)

    def enqueue(
        self, task: Task[_P, _R], args: Any, kwargs: Any, *,
        after: Iterable[ParentRef] | None = None, on_parent_failure: str = "cancel",
    ) -> TaskResult[_P, _R]:
        """Store ``task`` as a job, in the caller's transaction if there is one.

        Called inside ``transaction.atomic()``, the job exists only if that transaction
        commits (and the worker is woken only then, on PostgreSQL). ``after`` and
        ``on_parent_failure``: see :func:`enqueue_after`.
        """
        self._require_app()
        from prescient.engine import dependencies, store  # see the module's docstring
        from prescient.kinds import task_results
        from prescient.kinds import tasks as kind

        parents, policy = dependencies.parent_ids(after), dependencies.policy(on_parent_failure)
        self.validate_task(task)
        now = timezone.now()
        run_after = cast("datetime | timedelta | None", task.run_after)  # a timedelta too, here
        if isinstance(run_after, timedelta):
            due = now + run_after
        elif run_after is not None:
            due = run_after
        else:
            due = now
        if self.options.get("ROUND_TO_SLOT"):
            due = slots.round_up(due, int(setting("SLOT_MINUTES")))
        try:
            args, kwargs = kind.as_json(list(args)), kind.as_json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"The arguments of task {task.module_path} must be JSON: {exc}") from exc
        keys = limits.task_keys(task.module_path, task.queue_name, self.limits) if self.limits else ("", "")
        job = kind.new_job(task, self.alias, args, kwargs, due, run_after, now, uuid.uuid4().hex, keys)
        # The wake-up is delivered when the job commits (with the caller's transaction, if
        # any). Sent for a deferred task too, so that an idle worker sets its next wake-up to
        # the task's exact run_after.
        if not parents:
            # One statement, no savepoint in the caller's transaction: the key is new, it cannot clash.
            store.insert(job, wake=True, clash_free=True)
        else:
            with transaction.atomic():
                dependencies.lock_parents(parents)
                job.state = State.WAITING
                store.insert(job)
                dependencies.attach([job.pk], parents, policy, now)
                store.notify()
        result = task_results.result_of(job, task, TaskResultStatus.READY)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> AnyResult:
        """The result of the task ``result_id``: ``RUNNING`` from the statement that starts its
        run (with that run's start and worker id), ``READY`` while it waits (claimed but not yet
        started included), then ``SUCCESSFUL`` or ``FAILED`` from its history row."""
        self._require_app()
        from prescient.kinds import task_results  # see the module's docstring
        from prescient.kinds import tasks as kind
        from prescient.models import FutureJob, JobHistory

        try:
            pk = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        job = FutureJob.objects.filter(pk=pk, kind=kind.TaskKind.name).first()
        if job is not None:
            started = bool(job.reserved_by) and job.run_started_at is not None
            status = TaskResultStatus.RUNNING if started else TaskResultStatus.READY
            return task_results.result_of(job, _task_of(job), status)
        row = JobHistory.objects.filter(job_id=pk, kind=kind.TaskKind.name).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        status = TaskResultStatus.SUCCESSFUL if row.outcome == Outcome.COMPLETED else TaskResultStatus.FAILED
        return task_results.result_of(row, _task_of(row), status)


def enqueue_after(
    task: Task[_P, _R], *, after: Iterable[ParentRef], args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None, on_parent_failure: str = "cancel",
) -> TaskResult[_P, _R]:
    """Enqueue ``task`` to run once the jobs ``after`` (jobs, task results, or their ids) have
    ended, as :func:`prescient.schedule` does with ``after=``: it waits until then, and a
    parent that ends other than ``completed`` cancels it (``on_parent_failure="cancel"``) or
    not (``"run"``). The task must use a prescient backend."""
    backend = task.get_backend()
    if not isinstance(backend, PrescientBackend):
        raise InvalidTask(f"enqueue_after needs a prescient backend; {task.module_path} uses {backend.alias!r}")
    refs = [int(ref.id) if isinstance(ref, TaskResult) else ref for ref in after]
    return backend.enqueue(task, args, kwargs or {}, after=refs, on_parent_failure=on_parent_failure)


def _task_of(row: FutureJob | JobHistory) -> AnyTask:
    from prescient.kinds import tasks as kind  # see the module's docstring

    try:
        return kind.task_of(row)
    except kind.TaskNotFound as exc:
        raise TaskResultDoesNotExist(f"Result {row.pk}: {exc}") from None


def retry(row: Any) -> AnyResult:
    """Enqueue a finished task again, with the arguments, queue and priority it had.

    ``row`` is its JobHistory row. The new job is a new result (a new id), due at once.
    """
    from prescient.kinds import tasks as kind  # see the module's docstring
    from prescient.models import JobHistory

    if not isinstance(row, JobHistory) or row.kind != kind.TaskKind.name:
        raise ValueError(f"{row} is not a task")
    task = kind.clone(_task_of(row), run_after=None)
    payload = row.payload or {}
    return task.get_backend().enqueue(task, payload.get("args", []), payload.get("kwargs", {}))
