"""The live table's vacuum (PostgreSQL): the dead rows of a large drain cleared at the next pass.

Every job leaves dead row versions in ``prescient_futurejob`` and dead entries in its indexes
(its insert, its claim, the start of its run, its delete). Autovacuum clears them, but the
launcher looks at a database once per ``autovacuum_naptime`` (a minute by default; no table
can ask for sooner), and a queue drains a hundred thousand jobs in that minute. Until then the
idle tick's query walks the due index over the dead entries of every job drained (ten times
slower after 200,000 jobs) and the next sweep's claims and inserts work around them.

This duty reads the table's dead and live row counts from PostgreSQL's statistics (one cheap
query every :attr:`LiveTableVacuum.interval` seconds of a process's life: at a worker's
heartbeat pass, or in a host process that calls ``tick()`` again and again; a tick from cron
that lives for less leaves its drains to autovacuum) and, when a drain left at least
:data:`MIN_DEAD_ROWS` dead rows and more than :data:`DEAD_FRACTION` of the table, runs
``VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON)`` on it.

A long drain in a large table is vacuumed while it goes on, too (:data:`DRAIN_FACTOR`): the
claims' first index probes walk the dead entries of every job claimed since the last vacuum
(they sit at the head of the claim index, oldest first), so the walk costs each claim more as
the drain goes on. A million jobs due among ten million pending drained at 0.70x the rate of
ten thousand (bench ``scale``: 12 ms a claim late in the drain), and a fifth of ten million
dead rows comes only after two million jobs. A vacuum costs about the size of the table and
its indexes; the walk, summed over the claims, grows with the square of the dead rows: they
balance when the dead rows reach about :data:`DRAIN_FACTOR` times the square root of the
table's rows (190,000 at ten million), and the duty vacuums then.

Bounded: one process at a time (the duty's advisory lock); never while autovacuum (or anyone
else) is vacuuming it (``SKIP_LOCKED``: it skips rather than waits); and only when the dead rows
are many, so the vacuum's cost (a pass over the table and its indexes) is paid for by the rows
it clears.
Nothing is rewritten or locked against the sweep: ``VACUUM`` takes no lock that blocks
inserts, updates, deletes or ``SELECT … FOR UPDATE``.

A database user that does not own the table cannot vacuum it: PostgreSQL skips it with a
warning, and autovacuum remains the only cleaner. On SQLite there are no dead rows to clear
(deleted rows' pages are reused at once); the duty does nothing there.
See docs/operations.md, "The live table under churn".
"""

from __future__ import annotations

import logging
import math
from datetime import datetime

from django.db import connection

from prescient.engine.sweep import Survey
from prescient.models import FutureJob

from . import Service

logger = logging.getLogger(__name__)

#: Fewer dead rows than this are left to autovacuum.
MIN_DEAD_ROWS = 10_000
#: And so are fewer than this fraction of all the table's rows (live and dead)...
DEAD_FRACTION = 0.2
#: ... unless they are at least this many times the square root of the table's rows: a long
#: drain in a large table (60: 190,000 dead rows of ten million, 61,000 of a million).
DRAIN_FACTOR = 60


def dead_and_live() -> tuple[int, int]:
    """``(dead rows, live rows)`` of the live table, as PostgreSQL's statistics have them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE relid = %s::regclass",
            [FutureJob._meta.db_table],
        )
        row = cursor.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def worth_vacuuming(dead: int, live: int) -> bool:
    """Whether a drain left enough dead rows, of all the table's rows, to pay for a vacuum."""
    rows = dead + live
    return dead >= MIN_DEAD_ROWS and (dead > DEAD_FRACTION * rows or dead >= DRAIN_FACTOR * math.sqrt(rows))


class LiveTableVacuum(Service):
    name = "live_vacuum"
    #: Seconds between two looks at the statistics in one process.
    interval = 10.0
    own_transactions = True  # VACUUM cannot run inside a transaction

    def is_due(self, survey: Survey) -> bool:
        return connection.vendor == "postgresql" and super().is_due(survey)

    def run_once(self, now: datetime) -> int:
        dead, live = dead_and_live()
        if not worth_vacuuming(dead, live):
            return 0
        table = connection.ops.quote_name(FutureJob._meta.db_table)
        logger.info("upkeep live_vacuum: %s dead rows of %s, vacuuming %s", dead, dead + live, table)
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) {table}")
        return dead
