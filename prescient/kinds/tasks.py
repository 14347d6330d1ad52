"""The kind of django.tasks tasks enqueued on a :class:`prescient.tasks.PrescientBackend`.

A task job is about no entity (its ``entity_name`` is :data:`TASK_ENTITY`, its key a random
id); its check name is ``task:<module path>``. Its arguments, attempts and return value travel
in ``payload``. This module knows the tasks (by module path), runs one under its timeout as
it was enqueued (its queue and priority), retries it at once rather than at the next slot, and
sends ``task_started`` / ``task_finished`` as Django's own backends do. How a task job reads as
a django.tasks result (attempts, run times, ``TaskError`` entries) is :mod:`.task_results`.

Nothing is imported from a string kept in the database unless it is safe: a task's module is
imported on demand only when it belongs to an installed app's package, and what it names must
be a Task using a prescient backend (:func:`find_task`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from importlib import import_module
from typing import TYPE_CHECKING, Any, ParamSpec, TypeAlias, TypeVar, cast

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils.html import format_html
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext

from prescient import checks, diagnostics, limits
from prescient.checks import Check
from prescient.cleaning import unstorable
from prescient.clock import db_now
from prescient.conf import BACKEND_PATH, option_problems
from prescient.engine import runner, store
from prescient.engine.decisions import RUN_FAILED, Decision, describe, failure
from prescient.engine.kind import JobKind
from prescient.exceptions import PrescientError, RunFailed, UnknownCheck
from prescient.models import FutureJob, JobHistory
from prescient.states import Event, Outcome

from .task_results import detail_error, note_attempt, note_end, result_of, traceback_text

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite

    #: Any task or result, whatever its arguments and return value (generic in the stubs only).
    AnyTask: TypeAlias = Task[..., Any]
    AnyResult: TypeAlias = TaskResult[..., Any]
    _P = ParamSpec("_P")
    _R = TypeVar("_R")

logger = logging.getLogger(__name__)

#: The ``entity_name`` of task jobs: they are about no entity.
TASK_ENTITY = "prescient.task"
#: Prefix of the check name of a task job: ``task:<module path>``.
CHECK_PREFIX = "task:"
#: Every task created with a PrescientBackend, by module path (the first one of each path).
_tasks: dict[str, AnyTask] = {}


class TaskNotFound(PrescientError, LookupError):
    """A task job names a module path that no installed app defines as a prescient task."""


# --- the tasks known -----------------------------------------------------------------------------


def check_name(task: AnyTask) -> str:
    return CHECK_PREFIX + task.module_path


def register_task(task: AnyTask, backend_alias: str, options: dict[str, Any]) -> None:
    """Make ``task`` runnable: known by its module path, with its timeout and retries."""
    path = task.module_path
    known = _tasks.get(path)
    if known is not None and known.func is task.func:
        return
    _tasks[path] = task
    max_retries = getattr(task, "max_retries", None)
    timeout = getattr(task, "timeout_seconds", None)
    checks.add(
        Check(
            name=check_name(task),
            func=_invoke,
            model_label=TASK_ENTITY,  # no model has this label: schedule() refuses it
            timeout_seconds=timeout if timeout is not None else options.get("TIMEOUT_SECONDS"),
            max_retries=max_retries if max_retries is not None else options.get("MAX_RETRIES"),
            options={"task": task, "backend": backend_alias, "retry_delay": options.get("RETRY_DELAY_SECONDS", 0)},
            kind=TaskKind.name,
        )
    )


def discover() -> None:
    """Import every installed app's ``tasks`` module, so its tasks are registered."""
    autodiscover_modules("tasks")


def _installed_package(module: str) -> bool:
    return any(module == app.name or module.startswith(app.name + ".") for app in apps.get_app_configs())


def find_task(path: str) -> AnyTask:
    """The prescient task at module path ``path``, importing its module if need be.

    The module is imported only when it belongs to an installed app's package, and the object
    found must be a Task using a prescient backend: anything else raises :class:`TaskNotFound`
    saying which, and nothing outside the installed apps is ever imported.
    """
    task = _tasks.get(path)
    if task is not None:
        return task
    module, _, name = path.rpartition(".")
    if not module or not _installed_package(module):
        raise TaskNotFound(
            f"Task {path!r} is not defined by any installed app: its module {module!r} is not in "
            "an installed app's package, so it was not imported"
        )
    try:
        found = getattr(import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise TaskNotFound(f"Task {path!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, Task):
        raise TaskNotFound(f"{path!r} is a {type(found).__name__}, not a django.tasks Task")
    if not getattr(found.get_backend(), "is_prescient", False):
        raise TaskNotFound(f"Task {path!r} uses backend {found.backend!r}, which is not a prescient backend")
    task = _tasks.get(path)  # creating it registered it (validate_task), with its backend's options
    if task is None:
        raise TaskNotFound(f"Task {path!r} was found but not registered by its backend")
    return task


def task_of(row: FutureJob | JobHistory) -> AnyTask:
    """The Task of a job or history row, as it was enqueued (TaskNotFound if unknown)."""
    path = row.job_exec.removeprefix(CHECK_PREFIX)
    if path not in _tasks:
        discover()
    return as_enqueued(find_task(path), row)


def as_enqueued(task: AnyTask, row: FutureJob | JobHistory) -> AnyTask:
    """``task`` as it was enqueued for ``row``: with the queue, priority, backend and
    ``run_after`` that ``using()`` gave it (the row keeps them), not those it was decorated with."""
    payload = row.payload if isinstance(row.payload, dict) else {}
    run_after = payload.get("run_after")
    return clone(
        task,
        queue_name=row.queue,
        priority=row.priority,
        backend=payload.get("backend", task.backend),
        run_after=datetime.fromisoformat(run_after) if run_after else None,
    )


def clone(task: AnyTask, **changes: Any) -> AnyTask:
    """A copy of ``task`` with ``changes``, made without validating it again."""
    copied = object.__new__(type(task))
    for f in dataclasses.fields(task):
        object.__setattr__(copied, f.name, changes.get(f.name, getattr(task, f.name)))
    return copied


#: Scalars that come back from JSON as they went in (a float only when finite).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat(value: list[Any] | dict[str, Any]) -> list[Any] | dict[str, Any] | None:
    """A copy of a list, or of a dict with text keys, of scalars that come back from JSON as they
    are (the arguments of most tasks), else None: nothing to round-trip through JSON."""
    items = value.values() if type(value) is dict else value
    if type(value) is dict and any(type(key) is not str for key in value):
        return None
    for item in items:
        kind = type(item)
        if kind not in _SCALARS or (kind is float and not math.isfinite(cast(float, item))):
            return None
    return value.copy()


def as_json(value: Any) -> Any:
    """``value`` as it comes back from JSON; TypeError or ValueError if it does not fit (or holds
    a string the database cannot store)."""
    flat = _flat(value) if type(value) in (list, dict) else None
    result = json.loads(json.dumps(normalize_json(value), allow_nan=False)) if flat is None else flat
    problem = unstorable(result)
    if problem:
        raise ValueError(problem)
    return result


def new_job(task: AnyTask, backend_alias: str, args: list[Any], kwargs: dict[str, Any], due: datetime,
            run_after: Any, now: datetime, key: str, keys: tuple[str, str] = ("", "")) -> FutureJob:
    """The (unsaved) job of one enqueued task (``keys``: its limit and rate keys)."""
    return store.new_job(
        limit_key=keys[0],
        rate_key=keys[1],
        kind=TaskKind.name,
        entity_name=TASK_ENTITY,
        entity_key=key,
        job_exec=check_name(task),
        due=due,
        now=now,
        queue=task.queue_name,
        priority=task.priority,
        payload={
            "args": args,
            "kwargs": kwargs,
            "takes_context": task.takes_context,
            "backend": backend_alias,
            "run_after": None if run_after is None else due.isoformat(),
            "worker_ids": [],
            "started_at": None,
            "last_attempted_at": None,
        },
    )


# --- running -----------------------------------------------------------------------------------


def _perform(task: AnyTask, job: FutureJob) -> Any:
    """One run of ``task`` for ``job``, as :func:`prescient.engine.runner.call` calls it (under
    its timeout, whatever it raises): ``task_started`` sent, the task called, its value made
    JSON. A ``task_started`` receiver is host code run as part of the run: what it raises fails
    the run, as if the task had raised it (django-tasks-db's worker does the same)."""
    running = result_of(job, task, TaskResultStatus.RUNNING)
    task_started.send(type(task.get_backend()), task_result=running)
    value = runner.resolve(_invoke(task, job, running))  # an async def task awaited, in its timeout
    try:
        return as_json(value)
    except Exception as exc:
        raise TypeError(f"task {task.module_path} returned a value that is not JSON ({exc})") from exc


def _invoke(task: AnyTask, job: FutureJob, running: AnyResult | None = None) -> Any:
    payload = job.payload or {}
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    # An async def task is awaited on this process's loop (runner.call), not on a loop of its own.
    call = task.acall if inspect.iscoroutinefunction(task.func) else task.call
    if task.takes_context:
        result = running if running is not None else result_of(job, task, TaskResultStatus.RUNNING)
        return call(TaskContext(task_result=result), *args, **kwargs)
    return call(*args, **kwargs)


def _retry_soon(decision: Decision, check: Check | None, now: datetime) -> None:
    """A task's retry is due at once (or after RETRY_DELAY_SECONDS), not at the next slot."""
    if decision.event != Event.RETRY:
        return
    delay = float((check.options.get("retry_delay") if check is not None else 0) or 0)
    # Strictly after ``now``, so that the tick which ran it does not run it again at once.
    decision.next_check_at = now + max(timedelta(seconds=delay), timedelta(microseconds=1))


def _announce(decision: Decision, task: AnyTask | None) -> None:
    """Send ``task_finished`` for a run that ends its task (written when the batch settles), as
    Django's own backends send it: for a failure, from inside a handler of the run's exception,
    where Django's log receiver finds it (``sys.exc_info()``), so its line names the exception.

    Receivers are host code: whatever one raises (``SystemExit`` included) is logged, and the
    task's outcome stands, since the receivers were told it: a finished task is not run again
    because a receiver failed. A receiver that hangs is stopped as a run that overruns is (the
    run is not over until this returns: the worker's supervisor or the tick's guard watches it).
    """
    if decision.event != Event.FINISH or task is None:
        return
    failed = decision.outcome != Outcome.COMPLETED
    result = result_of(decision.job, task, TaskResultStatus.FAILED if failed else TaskResultStatus.SUCCESSFUL)
    exception = decision.exception if failed else None
    try:
        sender = type(task.get_backend())
        if exception is None:
            task_finished.send(sender, task_result=result)
        else:
            frames = exception.__traceback__
            try:
                raise exception
            except BaseException:  # raised only so that receivers see it in sys.exc_info()
                exception.__traceback__ = frames  # the run's own traceback, without this re-raise
                task_finished.send(sender, task_result=result)
    except BaseException as exc:  # a receiver is host code: it may raise anything
        logger.error(
            "task id=%s: a task_finished receiver raised %s; the task's outcome stands",
            decision.job.pk, describe(exc), exc_info=exc,
        )


class TaskKind(JobKind):
    """django.tasks tasks: about no entity, retried at once, results kept in the payload."""

    name = "task"
    verbose_name = "task"

    def definition(self, job: FutureJob | JobHistory) -> Check:
        try:
            return checks.get_check(job.job_exec)
        except UnknownCheck:
            find_task(job.job_exec.removeprefix(CHECK_PREFIX))  # import its module if allowed
            return checks.get_check(job.job_exec)

    def prepare(self, jobs: Sequence[FutureJob]) -> dict[int, Any]:
        """The moment the runs of ``jobs`` started (the statement that started them has just
        returned), by this process's monotonic clock: each run's end is its ``run_started_at``
        (the database's clock) plus the time since, so that ``finished_at`` follows
        ``started_at`` on one clock, whatever this host's clock says."""
        return dict.fromkeys((job.pk for job in jobs), time.monotonic())

    def run(self, job: FutureJob, context: Any, now: datetime) -> Decision:
        since = context if isinstance(context, float) else time.monotonic()
        began = job.run_started_at or db_now()
        try:
            check = self.definition(job)
        except PrescientError as exc:
            decision = failure(Decision(job=job, event=Event.FINISH), None, describe(exc), now, exception=exc)
            detail_error(job, decision.exception_path, traceback_text(decision))
            note_end(job, began + timedelta(seconds=time.monotonic() - since))
            _retry_soon(decision, None, now)
            return decision
        task = as_enqueued(check.options["task"], job)
        note_attempt(job, began)
        outcome = runner.call(_perform, (task, job), check.timeout, f"{check.name}[{job.pk}]", "task")
        back = runner.handed_back(job, outcome, now)
        if back is not None:
            return back
        note_end(job, began + timedelta(seconds=time.monotonic() - since))
        decision = Decision(job=job, event=Event.FINISH, seconds=outcome.seconds, ran=True)
        if outcome.failed:
            decision = failure(decision, check, outcome.error, now, exception=outcome.exception,
                               exception_path=outcome.exception_path, traceback=outcome.traceback)
            detail_error(job, decision.exception_path, traceback_text(decision))
        else:
            job.payload = {**(job.payload or {}), "return_value": outcome.value}
            decision.outcome = Outcome.COMPLETED
        _retry_soon(decision, check, now)
        _announce(decision, task)
        return decision

    def after_failed_run(self, decision: Decision, now: datetime) -> None:
        job = decision.job
        try:
            check: Check | None = self.definition(job)
        except PrescientError:
            check = None
        began = job.run_started_at or now
        note_attempt(job, began)
        note_end(job, began + timedelta(seconds=decision.seconds))  # the run's time, as its supervisor saw it
        detail_error(job, decision.exception_path, traceback_text(decision))
        _retry_soon(decision, check, now)
        _announce(decision, None if check is None else as_enqueued(check.options["task"], job))

    def after_lost_run(self, job: FutureJob, now: datetime) -> None:
        began = job.run_started_at or now
        note_attempt(job, began)
        note_end(job, max(began, now))  # found lost now: it ended by then, and not before it started
        detail_error(job, RUN_FAILED, f"{RunFailed.__name__}: {job.last_error}\n")

    def rerun_job(self, row: JobHistory, now: datetime, *, paused: bool) -> FutureJob:
        """The task enqueued again, due now: the arguments, queue, priority and backend it had (a
        new id: a task is about no entity, so it never clashes with a live one)."""
        task = clone(task_of(row), run_after=None)
        payload = row.payload if isinstance(row.payload, dict) else {}
        backend = task.get_backend()
        declared = getattr(backend, "limits", None)
        keys = limits.task_keys(task.module_path, task.queue_name, declared) if declared else ("", "")
        return new_job(task, backend.alias, payload.get("args", []), payload.get("kwargs", {}), now, None, now,
                       uuid.uuid4().hex, keys)

    def describe(self, row: FutureJob | JobHistory) -> str:
        """The task's call, e.g. ``add(4, 5, name='x')``, its arguments shortened."""
        payload = row.payload if isinstance(row.payload, dict) else {}
        args = [repr(value) for value in payload.get("args", [])]
        args += [f"{key}={value!r}" for key, value in (payload.get("kwargs") or {}).items()]
        text = ", ".join(args)
        if len(text) > 120:
            text = text[:119] + "…"
        return f"{row.job_exec.removeprefix(CHECK_PREFIX).rpartition('.')[2]}({text})"

    def describe_html(self, row: FutureJob | JobHistory, site: AdminSite) -> str:
        """The call, with the task's queue and priority below it."""
        return format_html(
            "{}<br><small>{}</small>", self.describe(row),
            gettext("task · queue %(queue)s · priority %(priority)s") % {"queue": row.queue, "priority": row.priority},
        )

    def system_checks(self) -> list[CheckMessage]:
        """Each prescient backend's OPTIONS: known keys, and values of the right type."""
        errors: list[CheckMessage] = []
        for alias, config in (getattr(settings, "TASKS", None) or {}).items():
            if not isinstance(config, dict) or config.get("BACKEND") != BACKEND_PATH:
                continue
            errors.extend(_check_options(alias, config.get("OPTIONS", {})))
        return errors


def _check_options(alias: str, options: Any) -> list[CheckMessage]:
    """By the table that the backend applies when it is created (conf.OPTIONS_RULES)."""
    found = option_problems(alias, options)
    return [diagnostics.BY_ID[problem.code](problem.message, hint=problem.got) for problem in found]
