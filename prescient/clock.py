"""The one clock that judges leases, heartbeats and due times: the database server's.

Each host's clock may be off by seconds or minutes; the database's is one for everybody. Ticks
and workers read it once per step (:func:`db_now`) or let the statement compute it
(:func:`db_clock`). An explicit ``now`` given to a verb, a tick or a command still decides what
is due and how times are written (replays, tests), but never whether a claim is stale.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models.functions import Now
from django.utils import timezone

from . import reads


def from_iso(value: object) -> datetime | None:
    """A time stored as ISO 8601 text (a payload's ``met_at``, a rung), or None when there is
    none or it is not one."""
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def db_now() -> datetime:
    """The time by the database server's clock (PostgreSQL's ``statement_timestamp()``).

    SQLite runs on this host: its clock is the host's. Inside :func:`prescient.reads.reading`,
    the clock of the database read (a replica's: the same time, without a trip to the primary).
    """
    database = connections[reads.current() or DEFAULT_DB_ALIAS]
    if database.vendor != "postgresql":
        return timezone.now()
    with database.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        row = cursor.fetchone()
    assert row is not None
    value: datetime = row[0]
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def db_clock() -> Any:
    """"Now" by the database's clock, computed by the statement that writes it (PostgreSQL), or
    the host's time (SQLite)."""
    return Now() if connection.vendor == "postgresql" else timezone.now()


def skew_seconds() -> float:
    """This host's clock minus the database's, in seconds (the middle of the round trip)."""
    before = timezone.now()
    database = db_now()
    after = timezone.now()
    return ((before - database) + (after - database)).total_seconds() / 2
