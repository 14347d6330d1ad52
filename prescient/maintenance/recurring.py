"""Recurring schedules' upkeep: their occurrences produced, their declarations kept in step.

- :class:`Producer` runs whenever the pass's survey saw a schedule due: every occurrence due by
  ``now`` becomes a job (a tick then runs them in the same pass).
- :class:`Declarations` keeps the schedules declared with ``@prescient.periodic`` in the
  database: at a process's first pass once some are declared, whenever they change, and every
  :attr:`~Declarations.interval` seconds; a declared schedule whose declaration is gone is
  removed then.
- :class:`OccurrencePruner` deletes occurrence rows older than :data:`KEEP_OCCURRENCES`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from prescient import recurrence
from prescient.engine import recurring
from prescient.engine.store import schedules as writer
from prescient.engine.sweep import Survey

from . import Service

#: How long the record of a produced occurrence is kept.
KEEP_OCCURRENCES = timedelta(days=30)


class Producer(Service):
    name = "recurring"
    interval = 0.0

    def is_due(self, survey: Survey) -> bool:
        return survey.recurring

    def run_once(self, now: datetime) -> int:
        return recurring.produce(now).total


class Declarations(Service):
    name = "declared_schedules"
    interval = 300.0

    def __init__(self) -> None:
        super().__init__()
        self.synced: object = ()

    def _signature(self) -> object:
        return tuple(sorted(recurrence.declared().items(), key=lambda item: item[0]))

    def is_due(self, survey: Survey) -> bool:
        signature = self._signature()
        return (signature != () and signature != self.synced) or super().is_due(survey)

    def run_once(self, now: datetime) -> int:
        self.synced = self._signature()
        return recurring.sync_declared(now)


class OccurrencePruner(Service):
    name = "occurrence_pruner"
    interval = 3600.0

    def run_once(self, now: datetime) -> int:
        return writer.prune_occurrences(now - KEEP_OCCURRENCES)
