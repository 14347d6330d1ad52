"""What a recurring schedule is made of, before it is stored: :class:`Spec`, and the
schedules declared in code with ``@prescient.periodic`` (kept in the database by the upkeep
service :mod:`prescient.maintenance.recurring`)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from . import cron
from .exceptions import InvalidSchedule

CATCH_UP = ("latest", "all", "skip")


@dataclasses.dataclass(frozen=True)
class Spec:
    """A schedule as given: its name, the template of its occurrences' jobs, and its timing."""

    name: str
    kind: str
    entity_name: str
    job_exec: str
    entity_key: str = ""
    workflow: str = ""
    queue: str = ""
    priority: int = 0
    payload: Any = None
    cron: str = ""
    every: timedelta | None = None
    timezone: str = "UTC"
    catch_up: str = "latest"

    def fields(self, slot_minutes: int) -> dict[str, Any]:
        """The Schedule row's fields, validated (InvalidSchedule saying what is wrong)."""
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 200:
            raise InvalidSchedule(f"A schedule needs a name of 1 to 200 characters, got {self.name!r}")
        if bool(self.cron) == (self.every is not None):
            raise InvalidSchedule(f"Schedule {self.name!r}: give either cron or every, not both or neither")
        expression, every_seconds = "", None
        if self.every is not None:
            if not isinstance(self.every, timedelta):
                raise InvalidSchedule(f"Schedule {self.name!r}: every must be a timedelta")
            if self.every < timedelta(minutes=slot_minutes) or self.every.microseconds:
                raise InvalidSchedule(
                    f"Schedule {self.name!r}: every={self.every} is under one slot ({slot_minutes} minutes) "
                    "or not whole seconds"
                )
            every_seconds = int(self.every.total_seconds())
        else:
            expression = cron.validate(self.cron)
        cron.zone(self.timezone)
        if self.catch_up not in CATCH_UP:
            raise InvalidSchedule(f"Schedule {self.name!r}: catch_up must be one of {', '.join(CATCH_UP)}")
        if self.catch_up == "all" and self.entity_key:
            raise InvalidSchedule(
                f"Schedule {self.name!r}: catch_up='all' is for task schedules; a check has one pending job "
                "per entity, so use 'latest' or 'skip'"
            )
        return {
            "kind": self.kind, "entity_name": self.entity_name, "entity_key": self.entity_key,
            "job_exec": self.job_exec, "workflow": self.workflow or "", "queue": self.queue,
            "priority": self.priority, "payload": self.payload, "cron": expression,
            "every_seconds": every_seconds, "timezone": self.timezone, "catch_up": self.catch_up,
        }


_declared: dict[str, Spec] = {}
_state = {"loaded": False}


def declare(spec: Spec) -> None:
    """Record a schedule declared in code (``@prescient.periodic``)."""
    _declared[spec.name] = spec


def forget(name: str) -> None:
    _declared.pop(name, None)


def declared() -> dict[str, Spec]:
    return dict(_declared)


def mark_loaded(value: bool = True) -> None:
    """Say that every declaration is imported (apps.ready, after the tasks modules): only then
    may the upkeep service remove a declared schedule whose declaration is gone."""
    _state["loaded"] = value


def loaded() -> bool:
    return _state["loaded"]
