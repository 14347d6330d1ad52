"""prescient: durable future checks for Django.

    @prescient.check("shop.unshipped", model="shop.Order")
    def unshipped(order, job): ...

    prescient.schedule(order, "shop.unshipped", delay=timedelta(hours=3))
    prescient.cancel(order, "shop.unshipped")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .exceptions import (
    AlreadyRegistered,
    CheckTimeout,
    InvalidEntity,
    InvalidTime,
    InvalidTransition,
    PrescientError,
    UnknownCheck,
)
from .registry import Check, check, get_check

if TYPE_CHECKING:
    from .scheduler import tick
    from .services import (
        JobNotFound,
        cancel,
        kill,
        pause,
        release,
        run_now,
        schedule,
        schedule_many,
        sleep,
    )

__version__ = "0.1.0"

# The verbs touch models, which cannot be imported before Django's app registry is ready,
# so they are loaded on first use.
_LAZY = {
    "schedule": "services",
    "schedule_many": "services",
    "cancel": "services",
    "pause": "services",
    "release": "services",
    "kill": "services",
    "run_now": "services",
    "sleep": "services",
    "JobNotFound": "services",
    "tick": "scheduler",
}

__all__ = [
    "AlreadyRegistered",
    "Check",
    "CheckTimeout",
    "InvalidEntity",
    "InvalidTime",
    "InvalidTransition",
    "JobNotFound",
    "PrescientError",
    "UnknownCheck",
    "cancel",
    "check",
    "get_check",
    "kill",
    "pause",
    "release",
    "run_now",
    "schedule",
    "schedule_many",
    "sleep",
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
