"""prescient: durable future checks for Django.

    @prescient.check("shop.unshipped", model="shop.Order")
    def unshipped(order, job): ...

    prescient.schedule(order, "shop.unshipped", delay=timedelta(hours=3))
    prescient.cancel(order, "shop.unshipped")

    @prescient.expectation("shop.shipped", model="shop.Order", met=Q(status="shipped"),
                           ladder=[timedelta(hours=3), timedelta(hours=24)])
    def not_shipped(order, job, step): ...

    prescient.expect(order, "shop.shipped")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors, signals
from .checks import RELEASE, Check, check, get_check
from .exceptions import (
    AlreadyRegistered,
    CheckTimeout,
    HistoryNotFound,
    ImmutableField,
    InvalidDependency,
    InvalidEntity,
    InvalidSchedule,
    InvalidTime,
    InvalidTransition,
    JobNotFound,
    PrescientError,
    Release,
    RerunRefused,
    UnknownCheck,
    UnknownParent,
    UnknownWorkflow,
    WrongKind,
)
from .expectations import Expectation, expectation
from .limits import Limit, Rate

if TYPE_CHECKING:
    from .engine.verbs import (
        cancel,
        kill,
        pause,
        release,
        rerun,
        run_now,
        schedule,
        schedule_many,
        sleep,
    )
    from .kinds.expecting import expect, recheck
    from .runtime.tick import tick
    from .schedules import periodic, recurring, stop_recurring
    from .tasks import enqueue_after

#: PEP 440; the only place the version is written (pyproject.toml reads it). Between releases it
#: is the next one's ".dev0" (docs/development.md#releasing).
__version__ = "0.4.0.dev0"

# The verbs touch models, which cannot be imported before Django's app registry is ready,
# so they are loaded on first use.
_LAZY = {
    "schedule": "engine.verbs",
    "schedule_many": "engine.verbs",
    "cancel": "engine.verbs",
    "pause": "engine.verbs",
    "release": "engine.verbs",
    "rerun": "engine.verbs",
    "kill": "engine.verbs",
    "run_now": "engine.verbs",
    "sleep": "engine.verbs",
    "enqueue_after": "tasks",
    "expect": "kinds.expecting",
    "recheck": "kinds.expecting",
    "tick": "runtime.tick",
    "recurring": "schedules",
    "stop_recurring": "schedules",
    "periodic": "schedules",
}

__all__ = [
    "RELEASE",
    "AlreadyRegistered",
    "Check",
    "CheckTimeout",
    "Expectation",
    "HistoryNotFound",
    "ImmutableField",
    "InvalidDependency",
    "InvalidEntity",
    "InvalidSchedule",
    "InvalidTime",
    "InvalidTransition",
    "JobNotFound",
    "Limit",
    "PrescientError",
    "Rate",
    "Release",
    "RerunRefused",
    "UnknownCheck",
    "UnknownParent",
    "UnknownWorkflow",
    "WrongKind",
    "cancel",
    "check",
    "enqueue_after",
    "errors",
    "expect",
    "expectation",
    "get_check",
    "kill",
    "pause",
    "periodic",
    "recheck",
    "recurring",
    "release",
    "rerun",
    "run_now",
    "schedule",
    "schedule_many",
    "signals",
    "sleep",
    "stop_recurring",
    "tick",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'prescient' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"prescient.{module}"), name)
    globals()[name] = value
    return value
