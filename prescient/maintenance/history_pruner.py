"""The history pruner: ``JobHistory`` rows kept past their retention are deleted.

``PRESCIENT["HISTORY_RETENTION_DAYS"]`` says how many days a row is kept after its job finished,
per outcome (``"*"``: every outcome not named; absent without ``"*"``, or ``None``: forever;
the whole setting ``None``: every row forever). A row is expired once it finished strictly
before ``now - days``: a row exactly at the cut-off stays.

Rows are deleted in batches of :data:`BATCH_SIZE`, each one short statement of its own (see
:mod:`prescient.engine.store.history`), so no transaction is held for long however far behind
the pruner is. As an upkeep duty it runs every :attr:`HistoryPruner.interval` seconds and stops
after :data:`BATCHES_PER_RUN` batches, so a worker's or a tick's pass stays short; when it
stopped with rows left, it runs again at the next pass until it has caught up.
``manage.py prescient_prune`` drains everything at once (:func:`prune_all`).

The duty and the command share one lock (the duty's advisory lock, see
:func:`prescient.maintenance.lock_name`), a transaction-level one taken in each of their
transactions: each batch is a transaction that takes the lock, deletes and commits (and so is the
step that finds and detaches the expired partitions; their tables are dropped after its commit).
The duty ends its pass at the first batch whose lock is not granted (another process is pruning;
a pass that did nothing raises :class:`prescient.maintenance.Busy`), and the command waits for
the lock at each batch. Two pruners deleting side by side would pick the same oldest rows: on
PostgreSQL the second one's DELETE waits for the first, finds them gone and comes back short,
which reads as "nothing left" (rows stayed expired), and two DELETEs that lock the same rows in
different orders can deadlock. One batch at a time, each seeing what the one before it
committed, a short batch means that no expired row of that outcome is left. A transaction-level
lock goes with its transaction's commit, on whatever server connection a pooler lent it: a
session lock would be released by a statement of its own, which a pooler in transaction mode may
send to another server connection, leaving the lock held (docs/operations.md, "PgBouncer").

Judged as of ``now``, but never later than the database's clock: a replay's ``now`` in the
future does not delete history that has not expired yet.

On PostgreSQL, with the history table partitioned (migration 0024), each prune first drops the
partitions whose every row is expired (:func:`prescient.maintenance.history_partitions.drop_expired`):
a day of ten million rows goes in one statement instead of ten thousand batches. The batches then
take what is left (the expired rows of partitions that also hold rows kept longer). A partition
whose lock was busy is left for the next pass, and so is that pass's deleting: its rows are
better dropped than deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection

from prescient.clock import db_now
from prescient.conf import setting
from prescient.engine import store
from prescient.engine.sweep import Survey
from prescient.models import JobHistory
from prescient.states import Outcome

from . import Busy, Service, history_partitions, lock_name

#: Rows deleted by one statement.
BATCH_SIZE = 1000
#: Batches (that deleted something) one run of the upkeep duty stops after.
BATCHES_PER_RUN = 10


def retention() -> dict[str, int | None]:
    """Days each outcome's rows are kept (None: forever), as the setting says."""
    days: dict[str, int | None] | None = setting("HISTORY_RETENTION_DAYS")
    if days is None:
        return dict.fromkeys(Outcome.values)
    return {outcome: days.get(outcome, days.get("*")) for outcome in Outcome.values}


def cutoffs(now: datetime) -> dict[str, datetime]:
    """``{outcome: cut-off}`` of the outcomes that are pruned: their rows that finished before
    the cut-off are expired. Outcomes kept forever are absent."""
    return {outcome: now - timedelta(days=days) for outcome, days in retention().items() if days is not None}


@dataclass
class Pruned:
    """What one prune removed (or would remove, in a dry run), per pruned outcome."""

    cutoffs: dict[str, datetime]
    removed: dict[str, int] = field(default_factory=dict)
    #: False when it stopped at its bound with expired rows perhaps left.
    complete: bool = True
    #: Per outcome, the newest ``finished_at`` deleted: where the next batch starts.
    resume: dict[str, datetime] = field(default_factory=dict)
    #: The history partitions dropped whole (or that would be, in a dry run), with about how
    #: many rows each (PostgreSQL's count as of its last ANALYZE); not in ``removed``.
    dropped: dict[str, int] = field(default_factory=dict)
    #: True when it stopped because another process held the lock (``prune(lock=…)``): that
    #: one goes on pruning.
    yielded: bool = False

    @property
    def total(self) -> int:
        return sum(self.removed.values()) + sum(self.dropped.values())


def expired(now: datetime) -> Pruned:
    """How many rows of each pruned outcome are expired as of ``now`` (nothing deleted)."""
    limits = cutoffs(now)
    counts = {
        outcome: JobHistory.objects.filter(outcome=outcome, finished_at__lt=before).count()
        for outcome, before in limits.items()
    }
    dropped = history_partitions.drop_expired(limits, dry_run=True).partitions
    return Pruned(limits, counts, dropped=dict.fromkeys(dropped, 0))  # their rows are in the counts


def prune(
    now: datetime,
    *,
    batch_size: int | None = None,
    max_batches: int | None = None,
    resume: dict[str, datetime] | None = None,
    lock: str | None = None,
    wait: bool = False,
) -> Pruned:
    """Delete the rows expired as of ``now``, batch by batch (of :data:`BATCH_SIZE` rows unless
    told), oldest first within each outcome; with ``max_batches``, stop after that many batches
    that deleted something. ``resume``: where an earlier prune that stopped at its bound got to
    (its ``Pruned.resume``): each outcome starts there rather than stepping over the index
    entries of the rows it deleted (until the table is vacuumed, they are still there).

    ``lock``: the advisory lock each step (the partitions dropped, then each batch) takes in its
    own transaction: waited for with ``wait``; otherwise a step whose lock is not granted ends the
    prune (``yielded``), and :class:`prescient.maintenance.Busy` is raised when it was the first."""
    size = batch_size or BATCH_SIZE
    done = Pruned(cutoffs(now), resume=dict(resume or {}))
    steps = 0

    @contextmanager
    def step() -> Iterator[bool]:
        nonlocal steps
        if lock is None:
            yield True
            return
        with store.exclusive(lock, wait=wait) as mine:
            if not mine:
                if not steps:
                    raise Busy(lock)
                done.yielded, done.complete = True, False
            steps += 1
            yield mine

    if connection.vendor == "postgresql":  # elsewhere there are no partitions
        # Found and detached in one step; their tables dropped after it, outside the lock.
        dropped = history_partitions.drop_expired(done.cutoffs, locked=step)
        if done.yielded:
            return done
        done.dropped = dropped.partitions
        if dropped.busy:
            done.complete = False
            return done
    batches = 0
    for outcome, before in done.cutoffs.items():
        done.removed[outcome] = done.removed.get(outcome, 0)
        while True:
            if max_batches is not None and batches >= max_batches:
                done.complete = False
                return done
            with step() as mine:
                if not mine:
                    return done
                deleted, newest = store.prune_history(outcome, before, size, after=done.resume.get(outcome))
            done.removed[outcome] += deleted
            if newest is not None:
                done.resume[outcome] = newest
            if deleted:
                batches += 1
            if deleted < size:
                break
    return done


def prune_all(now: datetime, *, batch_size: int | None = None) -> Pruned:
    """Delete every row expired as of ``now`` (``prescient_prune``), each step waiting for the
    upkeep duty's lock: a worker's or a tick's batch in progress ends first, and their passes
    stop at a batch of the command's, so when it returns no expired row is left."""
    return prune(now, batch_size=batch_size, lock=lock_name(HistoryPruner.name), wait=True)


class HistoryPruner(Service):
    name = "history_pruner"
    interval = 600.0
    own_transactions = True
    locks_each_transaction = True  # a transaction-level lock per batch (see the module's docs)
    due_at_start = True  # every cron tick prunes a little (a pass is at most BATCHES_PER_RUN batches)

    def __init__(self) -> None:
        super().__init__()
        self.behind = False
        self.resume: dict[str, datetime] = {}

    def is_due(self, survey: Survey) -> bool:
        if all(days is None for days in retention().values()):
            return False  # history kept forever: nothing to do, not even a query
        return self.behind or super().is_due(survey)

    def run_once(self, now: datetime) -> int:
        # While catching up, each pass goes on where the last one stopped; once caught up, the
        # next pass starts from the oldest row again (whatever appeared meanwhile is seen).
        # Another process pruning (Busy, or a batch whose lock it held) carries on from there.
        done = prune(
            min(now, db_now()), max_batches=BATCHES_PER_RUN, resume=self.resume if self.behind else None,
            lock=lock_name(self.name),
        )
        self.behind = not done.complete and not done.yielded
        self.resume = done.resume
        return done.total
