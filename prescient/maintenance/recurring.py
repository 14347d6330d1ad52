"""Recurring schedules' upkeep: their occurrences produced, their declarations kept in step.

- :class:`Producer` runs whenever the pass's survey saw a schedule due: every occurrence due by
  ``now`` becomes a job (a tick then runs them in the same pass).
- :class:`Declarations` keeps the schedules declared with ``@prescient.periodic`` in the
  database: at a process's first pass once some are declared, whenever they change, and every
  :attr:`~Declarations.interval` seconds; a declared schedule whose declaration is gone is
  removed then.
- :class:`OccurrencePruner` deletes occurrence rows older than :data:`KEEP_OCCURRENCES`, once
  an hour in a long-lived process; a tick from cron lives for seconds, so the producer also
  prunes them in each pass that produces occurrences (a read of the database's clock and one
  DELETE of at most :data:`PRUNE_PER_PASS` rows on their ``produced_at`` index).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from prescient import recurrence
from prescient.clock import db_now
from prescient.engine import recurring
from prescient.engine.store import schedules as writer
from prescient.engine.sweep import Survey

from . import Service

#: How long the record of a produced occurrence is kept.
KEEP_OCCURRENCES = timedelta(days=30)
#: How many expired records a producing pass deletes at most (it holds the producer's lock).
PRUNE_PER_PASS = 1_000


def prune_expired_occurrences(now: datetime, limit: int | None = None) -> int:
    """Delete the records of occurrences produced more than :data:`KEEP_OCCURRENCES` ago (at
    most ``limit``), judged by the earlier of ``now`` and the database's clock (a replay's
    future ``now`` prunes nothing recent); returns how many."""
    return writer.prune_occurrences(min(now, db_now()) - KEEP_OCCURRENCES, limit)


class Producer(Service):
    name = "recurring"
    interval = 0.0

    def is_due(self, survey: Survey) -> bool:
        return survey.recurring

    def run_once(self, now: datetime) -> int:
        produced = recurring.produce(now).total
        prune_expired_occurrences(now, PRUNE_PER_PASS)
        return produced


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
        return prune_expired_occurrences(now)
