"""Wake-ups: telling listening workers that a job is due now (PostgreSQL's NOTIFY)."""

from __future__ import annotations

from django.db import connection

#: The LISTEN/NOTIFY channel that wakes idle workers (PostgreSQL).
CHANNEL = "prescient_due"


def notify() -> None:
    """Tell listening workers that a job is due now: delivered when (and only if) the caller's
    transaction commits (PostgreSQL; a no-op elsewhere)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


def can_listen() -> bool:
    """Whether the database delivers wake-ups (PostgreSQL); others are polled."""
    return connection.vendor == "postgresql"
