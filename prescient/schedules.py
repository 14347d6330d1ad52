"""Recurring schedules, the public verbs: ``recurring``, ``stop_recurring`` and ``@periodic``.

    prescient.recurring("billing.remind-42", check="billing.renewal_reminder", entity=sub,
                        cron="0 9 * * MON", timezone="America/New_York")

    @prescient.periodic(cron="0 2 * * *", timezone="Europe/Berlin")
    @task
    def nightly_report(): ...

Each occurrence becomes a job of its own: a check on the entity, or the task enqueued. The
rules (occurrences, catch-up, daylight saving time) are in :mod:`prescient.engine.recurring`
and :mod:`prescient.cron`. Checks and tasks are found in their registries: nothing is imported
from a name given here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models

from prescient.checks import Check, schedulable
from prescient.engine import recurring as engine
from prescient.engine.verbs import entity_ref
from prescient.exceptions import InvalidSchedule, PrescientError
from prescient.recurrence import Spec, declare

if TYPE_CHECKING:
    from prescient.models import Schedule

__all__ = ["periodic", "recurring", "stop_recurring", "task_spec"]


def _json(value: Any, what: str) -> Any:
    from prescient.kinds.tasks import as_json  # Django 6 only: django.tasks

    try:
        return as_json(value)
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(f"The {what} of a task schedule must be JSON: {exc}") from None


def task_spec(name: str, task: Any, args: Any = (), kwargs: Any = None, **timing: Any) -> Spec:
    """The Spec of a schedule that enqueues ``task`` (a django.tasks Task on a prescient backend)."""
    try:
        from django.tasks import Task

        from prescient.kinds import tasks as task_kind
    except ImportError:  # Django 5.2
        raise InvalidSchedule("Task schedules need Django 6.0 or later (django.tasks)") from None
    if not isinstance(task, Task):
        raise InvalidSchedule(f"task must be a django.tasks Task, got {type(task).__name__}")
    if not getattr(task.get_backend(), "is_prescient", False):
        raise InvalidSchedule(
            f"Task {task.module_path} uses backend {task.backend!r}, which is not a prescient backend"
        )
    if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
        raise InvalidSchedule("args must be a list")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidSchedule("kwargs must be a dict")
    template = task_kind.new_job(
        task, task.backend, _json(list(args), "args"), _json(dict(kwargs or {}), "kwargs"),
        datetime(2000, 1, 1), None, datetime(2000, 1, 1), "",
    )
    return Spec(
        name=name, kind=template.kind, entity_name=template.entity_name, job_exec=template.job_exec,
        queue=template.queue, priority=template.priority, payload=template.payload, **timing,
    )


def check_spec(name: str, check: str | Callable[..., Any] | Check, entity: Any, **timing: Any) -> Spec:
    """The Spec of a schedule that starts ``check`` on ``entity``."""
    try:
        entry = schedulable(check)  # an expectation's name: refused, naming expect()
    except PrescientError as exc:
        raise InvalidSchedule(str(exc)) from None
    if entry.kind != "check":
        raise InvalidSchedule(f"{entry.name!r} is not a check: give it as task=")
    if not isinstance(entity, models.Model):
        raise InvalidSchedule(f"Check {entry.name!r} needs an entity (a saved model instance)")
    try:
        entity_name, entity_key = entity_ref(entity, entry)
    except PrescientError as exc:
        raise InvalidSchedule(str(exc)) from None
    return Spec(name=name, kind=entry.kind, entity_name=entity_name, entity_key=entity_key, job_exec=entry.name,
                **timing)


def recurring(
    name: str,
    *,
    check: str | Callable[..., Any] | Check | None = None,
    entity: models.Model | None = None,
    task: Any = None,
    args: Any = (),
    kwargs: Any = None,
    cron: str = "",
    every: timedelta | None = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    workflow: str = "",
    now: datetime | None = None,
) -> Schedule:
    """Create (or, for a name that exists, update) a recurring schedule.

    At each occurrence of ``cron`` (five fields, read in ``timezone``) or of ``every`` (an
    interval counted from the UTC epoch), ``check`` is started on ``entity``, or ``task`` is
    enqueued with ``args`` and ``kwargs``. The first occurrence is the first strictly after
    ``now``. Raises :class:`~prescient.exceptions.InvalidSchedule` and writes nothing when
    the input is not valid.
    """
    if (check is None) == (task is None):
        raise InvalidSchedule(f"Schedule {name!r}: give either check (with entity) or task, not both or neither")
    timing: dict[str, Any] = {
        "cron": cron, "every": every, "timezone": timezone, "catch_up": catch_up, "workflow": workflow,
    }
    if check is not None:
        if args or kwargs:
            raise InvalidSchedule(f"Schedule {name!r}: args and kwargs are for tasks; a check gets its entity")
        spec = check_spec(name, check, entity, **timing)
    else:
        if entity is not None:
            raise InvalidSchedule(f"Schedule {name!r}: a task schedule has no entity; pass args instead")
        spec = task_spec(name, task, args, kwargs, **timing)
    return engine.save(spec, now=now)


def stop_recurring(name: str) -> bool:
    """Remove the schedule ``name``; True if there was one. Jobs already produced stay."""
    return engine.stop(name)


def periodic(
    *, cron: str = "", every: timedelta | None = None, timezone: str = "UTC", catch_up: str = "latest",
    name: str | None = None, args: Any = (), kwargs: Any = None, workflow: str = "",
) -> Callable[[Any], Any]:
    """Declare a schedule of the task below in code; the upkeep service keeps it in the database
    (created, updated when this changes, removed when this goes). Named after the task's module
    path unless ``name`` is given. Validated now: a bad declaration fails at import."""

    def declare_task(task: Any) -> Any:
        spec = task_spec(
            name or str(getattr(task, "module_path", "")), task, args, kwargs,
            cron=cron, every=every, timezone=timezone, catch_up=catch_up, workflow=workflow,
        )
        from prescient.conf import setting

        spec.fields(int(setting("SLOT_MINUTES")))
        declare(spec)
        return task

    return declare_task
