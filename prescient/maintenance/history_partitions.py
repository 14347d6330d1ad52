"""History partitions (PostgreSQL): made ahead of time, and dropped whole once expired.

After migration 0024 the history table is partitioned by ``finished_at``, a partition per
``PRESCIENT["HISTORY_PARTITION"]`` (``"month"``, the default, or ``"day"``), in UTC. The duty
:class:`HistoryPartitions` makes, at each pass, the partitions of the current period and the next
ones (:data:`AHEAD`): rows never wait for one, and land in the DEFAULT partition only when they
finished outside every partition (long ago, or far ahead). A new partition never overlaps one that
exists: each period is cut to what no partition covers yet, so a change of granularity starts
after the last existing bound (a month made before a switch to days covers its days). Rows of the
new range found in the DEFAULT partition are moved into it (:func:`prescient.engine.parts.partitions.create`).

The history pruner drops whole partitions before it deletes rows (:func:`drop_expired`): a
partition goes when every outcome that has rows in it is pruned and expired over its whole range
(its upper bound is at or before that outcome's cut-off; ranges are ``[lower, upper)``). A
partition holding rows of an outcome kept longer (or forever) stays; the pruner's DELETE batches
take its expired rows meanwhile, and it goes once its last outcome expires. An empty partition
goes once it is past every cut-off. The DEFAULT partition is never dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection

from prescient.conf import setting
from prescient.engine.store import partitions as parts
from prescient.engine.sweep import Survey

from . import Service

logger = logging.getLogger(__name__)

#: Periods made past the current one, by granularity.
AHEAD = {"day": 3, "month": 2}


def start_of(when: datetime, unit: str) -> datetime:
    """The start of the period (``"day"`` or ``"month"``, UTC) that holds ``when``."""
    when = when.astimezone(UTC)
    if unit == "day":
        return datetime(when.year, when.month, when.day, tzinfo=UTC)
    return datetime(when.year, when.month, 1, tzinfo=UTC)


def after(start: datetime, unit: str) -> datetime:
    """The start of the period after the one that starts at ``start``."""
    if unit == "day":
        return start + timedelta(days=1)
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def name_of(lower: datetime, upper: datetime) -> str:
    """``prescient_jobhistory_p202611`` for a whole month, ``…_p20261129`` for anything else
    (a day, or the rest of a period after a change of granularity); names are unique because
    partitions never share a lower bound."""
    whole_month = lower.day == 1 and lower.time() == upper.time() and after(lower, "month") == upper
    return f"{parts.TABLE}_p{lower:%Y%m}" if whole_month else f"{parts.TABLE}_p{lower:%Y%m%d}"


def planned(now: datetime, unit: str, existing: list[parts.Partition]) -> list[tuple[str, datetime, datetime]]:
    """The partitions to make as of ``now``: ``(name, lower, upper)`` of each part of the
    current and the next :data:`AHEAD` periods that no partition in ``existing`` covers."""
    plan = []
    lower = start_of(now, unit)
    for _ in range(AHEAD[unit] + 1):
        upper = after(lower, unit)
        gaps = [(lower, upper)]
        for taken in existing:
            gaps = [piece for lo, hi in gaps for piece in _cut(lo, hi, taken.lower, taken.upper)]
        plan += [(name_of(lo, hi), lo, hi) for lo, hi in gaps]
        lower = upper
    return plan


Span = tuple[datetime, datetime]


def _cut(lower: datetime, upper: datetime, taken_lower: datetime, taken_upper: datetime) -> list[Span]:
    """``[lower, upper)`` less ``[taken_lower, taken_upper)``: none, one or two pieces."""
    if taken_upper <= lower or taken_lower >= upper:
        return [(lower, upper)]
    pieces: list[Span] = [(lower, taken_lower), (taken_upper, upper)]
    return [(lo, hi) for lo, hi in pieces if lo < hi]


def ensure_ahead(now: datetime) -> int:
    """Make the partitions :func:`planned` as of ``now``; returns how many were made (0 on a
    table that is not partitioned). Stops at the first whose lock was busy (the next pass goes on)."""
    if not parts.partitioned():
        return 0
    made = 0
    for name, lower, upper in planned(now, setting("HISTORY_PARTITION"), parts.partitions()):
        try:
            moved = parts.create(name, lower, upper)
        except parts.Busy:
            logger.info("history partitions: %s not made, the table was busy; next pass", name)
            break
        made += 1
        if moved:
            logger.info("history partitions: %s made, %d rows moved into it from the default", name, moved)
    return made


@dataclass
class Dropped:
    """What :func:`drop_expired` dropped (or would drop): ``{partition: about how many rows}``
    (:func:`prescient.engine.store.partitions.rows`)."""

    partitions: dict[str, int] = field(default_factory=dict)
    #: Partitions that were due to go but whose lock was not granted in time.
    busy: list[str] = field(default_factory=list)


def expired_partitions(cutoffs: dict[str, datetime]) -> list[parts.Partition]:
    """The partitions whose every row is expired under ``cutoffs`` (``{outcome: cut-off}`` of
    the outcomes that are pruned), oldest first; none on a table that is not partitioned."""
    if not cutoffs or not parts.partitioned():
        return []
    latest, earliest = max(cutoffs.values()), min(cutoffs.values())
    found = []
    for partition in parts.partitions():
        if partition.upper > latest:
            break  # it and those after it hold rows no rule has expired yet
        present = parts.outcomes(partition.name)
        if present:
            expired = all(o in cutoffs and partition.upper <= cutoffs[o] for o in present)
        else:  # empty: gone once past every cut-off (ahead of them, a partition waits for its rows)
            expired = partition.upper <= earliest
        if expired:
            found.append(partition)
    return found


def drop_expired(
    cutoffs: dict[str, datetime], *, dry_run: bool = False,
    locked: Callable[[], AbstractContextManager[bool]] | None = None,
) -> Dropped:
    """Drop the partitions whose every row is expired under ``cutoffs``; with ``dry_run``, only
    name them. ``locked``: makes the transaction (yielding whether to go on) in which they are
    found and detached, holding the pruner's lock (:func:`prescient.maintenance.history_pruner.prune`);
    the detached tables are dropped after its commit, under no lock of the history table."""
    done = Dropped()
    if dry_run:
        for partition in expired_partitions(cutoffs):
            done.partitions[partition.name] = parts.rows(partition.name)
        return done
    if cutoffs and parts.partitioned():
        for name in parts.leftovers():  # detached by a pass that died before it dropped them
            parts.discard(name)
            logger.info("history partitions: %s dropped (detached by an earlier pass)", name)
    detached: dict[str, int] = {}
    with locked() if locked is not None else nullcontext(True) as mine:
        if not mine:
            return done
        for partition in expired_partitions(cutoffs):
            rows = parts.rows(partition.name)
            if parts.detach(partition.name):
                detached[partition.name] = rows
            else:
                done.busy.append(partition.name)
    for name, rows in detached.items():
        parts.discard(name)
        done.partitions[name] = rows
        logger.info("history partitions: %s dropped (about %d rows)", name, rows)
    return done


class HistoryPartitions(Service):
    """Makes the history partitions ahead of time (PostgreSQL, a partitioned table)."""

    name = "history_partitions"
    interval = 3600.0
    due_at_start = True  # a tick from cron lives for seconds: it makes them at its first pass

    def is_due(self, survey: Survey) -> bool:
        # Partitions are there to be dropped: with history kept forever there is nothing to drop,
        # so nothing to make, and an idle tick stays one query (rows wait in the DEFAULT
        # partition; the first pass after a retention is set moves those of the periods it makes).
        days = setting("HISTORY_RETENTION_DAYS")  # as history_pruner.retention() reads it
        if connection.vendor != "postgresql" or days is None or all(value is None for value in days.values()):
            return False
        return super().is_due(survey)

    def run_once(self, now: datetime) -> int:
        return ensure_ahead(now)
