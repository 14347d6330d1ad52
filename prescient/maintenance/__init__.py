"""Upkeep: the duties that keep the tables healthy, one module each.

Each duty is a :class:`Service` with a ``name``, an ``interval`` and ``run_once(now) -> int``
(how many rows it dealt with). Ticks and workers call :func:`run_due` once per pass; it runs
each duty that is due, and on PostgreSQL only one process at a time runs a given duty (a
transaction-level advisory lock, never waited for), so ten workers do not all bury the same
rows. River's ``internal/maintenance`` and Oban's plugins are the models.

A duty runs in one transaction (holding its lock) unless it says it commits as it goes
(``own_transactions``). Such a duty either takes its lock itself in each of its transactions
(``locks_each_transaction``: the history pruner, a transaction-level lock per batch, raising
:class:`Busy` when the first is not granted) or, when its work cannot run in a transaction at all
(``VACUUM``: :mod:`.live_vacuum`), runs under a session-level lock whose unlock is checked
(:func:`prescient.engine.store.exclusive`). Only a transaction-level lock is safe behind a
pooler in transaction mode: a session lock's unlock may run on another server connection, and
the lock stays held (docs/operations.md, "PgBouncer"). A command that does a duty's work by hand
takes the same lock (:func:`lock_name`), waiting for it: ``prescient_prune`` and the pruners of
running workers never delete side by side.

Built in: :mod:`.rescuer` (stale claims: reclaimed or buried), :mod:`.waiters` (waiting jobs
whose parents ended but were missed), :mod:`.worker_pruner` (rows of workers stopped long
ago), :mod:`.history_pruner` (history rows past their retention) and :mod:`.recurring`
(recurring schedules' occurrences and declarations) and, on PostgreSQL, :mod:`.live_vacuum`
(the live table vacuumed after a large drain) and :mod:`.history_partitions` (the history's
partitions made ahead of time; the pruner drops the expired ones). A new duty is a new module registered
with :func:`register`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import ClassVar

from django.db import connection

from prescient.engine import store
from prescient.engine.sweep import Survey
from prescient.engine.sweep import survey as take_survey

logger = logging.getLogger(__name__)

__all__ = ["Busy", "Service", "lock_name", "register", "register_builtin", "registered_services", "run_due"]


def lock_name(duty: str) -> str:
    """The name of the advisory lock the duty ``duty`` runs under (see the module's docs)."""
    return f"maintenance:{duty}"


class Busy(Exception):
    """Raised by a duty that takes its lock in each of its transactions (``Service.locks_each_transaction``)
    when the first was not granted: another process is running it, and this pass did nothing."""


class Service:
    """One upkeep duty."""

    #: Unique; also names its advisory lock.
    name: ClassVar[str] = ""
    #: Seconds between two runs in one process (counted from the process's start).
    interval: ClassVar[float] = 3600.0
    #: Whether ``run_once`` commits as it goes (run outside a transaction) instead of in one.
    own_transactions: ClassVar[bool] = False
    #: With ``own_transactions``: whether ``run_once`` takes the duty's lock itself, a
    #: transaction-level lock in each of its transactions (raising :class:`Busy` when the first is
    #: not granted), rather than run under a session-level lock :func:`run_due` takes around it.
    locks_each_transaction: ClassVar[bool] = False
    #: Whether the first pass of a process runs it (a tick from cron lives for seconds: a duty
    #: that waits a whole ``interval`` first would never run in it).
    due_at_start: ClassVar[bool] = False

    def __init__(self) -> None:
        self.last_run = time.monotonic() - (self.interval if self.due_at_start else 0.0)
        #: What its last run did, by word, when a number of rows does not say it (the rescuer:
        #: reclaimed, handed_back, buried, slept, ended); :func:`run_due` passes it on.
        self.said: Counter[str] = Counter()

    def is_due(self, survey: Survey) -> bool:
        """Whether to run now, given the pass's survey (by default: once per ``interval``)."""
        return time.monotonic() - self.last_run >= self.interval

    def run_once(self, now: datetime) -> int:
        """Do the duty once, as of ``now``; returns how many rows it dealt with."""
        raise NotImplementedError


_services: dict[str, Service] = {}


def register(service: Service) -> Service:
    """Make ``service`` one of the duties :func:`run_due` runs (replacing one of its name)."""
    if not service.name:
        raise ValueError(f"{type(service).__name__} has no name")
    _services[service.name] = service
    return service


def registered_services() -> Iterator[Service]:
    for name in sorted(_services):
        yield _services[name]


def register_builtin() -> None:
    from .history_partitions import HistoryPartitions
    from .history_pruner import HistoryPruner
    from .live_vacuum import LiveTableVacuum
    from .recurring import Declarations, OccurrencePruner, Producer
    from .rescuer import Rescuer
    from .waiters import WaiterRepair
    from .worker_pruner import WorkerPruner

    builtin = (Rescuer(), WaiterRepair(), WorkerPruner(), HistoryPruner(), HistoryPartitions(), LiveTableVacuum())
    for service in (*builtin, Producer(), Declarations(), OccurrencePruner()):
        if service.name not in _services:
            register(service)


def run_due(now: datetime, *, survey: Survey | None = None, said: Counter[str] | None = None) -> dict[str, int]:
    """Run every duty that is due as of ``now``; returns ``{name: rows dealt with}`` of those
    that ran. ``survey``: the pass's survey, if it has one (else one is taken). ``said``: what
    the duties that ran did, by word (:attr:`Service.said`), is added to it."""
    if survey is None:
        survey = take_survey(now)
    done: dict[str, int] = {}
    for service in registered_services():
        if not service.is_due(survey):
            continue
        if service.own_transactions and connection.in_atomic_block:
            # Called inside the host's transaction (a tick() in atomic()): its batches would all
            # join that one transaction, the long one they exist to avoid. Left to a later pass.
            logger.debug("upkeep %s: skipped inside a transaction", service.name)
            continue
        service.last_run = time.monotonic()
        if service.locks_each_transaction:
            lock: contextlib.AbstractContextManager[bool] = contextlib.nullcontext(True)
        else:
            lock = store.exclusive(lock_name(service.name), hold_transaction=not service.own_transactions)
        with lock as mine:
            if not mine:
                logger.debug("upkeep %s: another process is running it", service.name)
                continue
            service.said = Counter()
            try:
                done[service.name] = service.run_once(now)
            except Busy:
                logger.debug("upkeep %s: another process is running it", service.name)
                continue
            if said is not None:
                said.update(service.said)
    return done
