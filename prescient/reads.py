"""Reads off the primary: which database the pages, the API's reads, the metrics and
``prescient_status`` read (``PRESCIENT["READ_DATABASE"]``), and how far behind it is.

Everything that writes or claims stays on the primary (the ``default`` database): the verbs,
the admin's actions, the API's POSTs, workers, ticks and upkeep. Only code run inside
:func:`reading` reads elsewhere, and only through the managers of the models shown
(:class:`ReadQuerySet`): a query that writes (``update``, ``delete``, ``select_for_update``,
``create``) still goes to the primary, and a model read from a replica and saved fails there
(read-only) instead of writing a stale row. API tokens, users and sessions are always read on
the primary (a token issued or revoked a moment ago counts at once).

A read that may precede a write in the same transaction never leaves the primary: a request
that is not a GET or HEAD (an admin action, an API POST) and code run inside an atomic block
on the primary read there. docs/operations.md, "Reads off the primary".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, models

from .conf import setting

if TYPE_CHECKING:
    from django.http import HttpRequest

_M = TypeVar("_M", bound=models.Model)

#: A replica whose replay is this many seconds behind, with WAL received and not replayed yet,
#: is said to lag: the pages, the API's lists and prescient_status then say "as of" its last replay.
AS_OF_AFTER_SECONDS = 5.0
#: The methods of requests read off the primary; any other may act on what it reads.
READ_METHODS = frozenset({"GET", "HEAD"})

#: The alias the queries of :class:`ReadQuerySet` read, inside :func:`reading`.
_routed: ContextVar[str | None] = ContextVar("prescient_read_alias", default=None)


def read_alias() -> str:
    """The database alias reads are served from: ``READ_DATABASE``, or the primary."""
    alias = setting("READ_DATABASE")
    return DEFAULT_DB_ALIAS if alias is None else str(alias)


def current() -> str | None:
    """The alias :func:`reading` routes reads to here, or None outside it."""
    return _routed.get()


@contextlib.contextmanager
def reading(request: HttpRequest | None = None) -> Iterator[str]:
    """Within: the reads of prescient's models go to :func:`read_alias`; yields the alias used.

    The primary instead when ``request`` is not a GET or HEAD (it may act on what it reads) or
    when the primary is inside a transaction (a read there may precede a write)."""
    alias = read_alias()
    if request is not None and request.method not in READ_METHODS:
        alias = DEFAULT_DB_ALIAS
    if alias != DEFAULT_DB_ALIAS and connections[DEFAULT_DB_ALIAS].in_atomic_block:
        alias = DEFAULT_DB_ALIAS
    token = _routed.set(alias)
    try:
        yield alias
    finally:
        _routed.reset(token)


def on_primary(queryset: models.QuerySet[_M]) -> models.QuerySet[_M]:
    """``queryset`` read again on the primary, whatever it was read on: what an action acts on."""
    return queryset.using(DEFAULT_DB_ALIAS)


def as_of(alias: str) -> datetime | None:
    """When ``alias`` is a PostgreSQL standby that lags, the commit time of the last transaction
    it replayed (what it shows is as of then); None for the primary, SQLite, a server that is not
    in recovery, or a standby that replayed all it received or replayed within
    :data:`AS_OF_AFTER_SECONDS` (an idle primary sends nothing: no news is not a lag)."""
    if alias == DEFAULT_DB_ALIAS or connections[alias].vendor != "postgresql":
        return None
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT pg_last_xact_replay_timestamp(), "
                "pg_is_in_recovery() AND pg_last_wal_receive_lsn() IS DISTINCT FROM pg_last_wal_replay_lsn() "
                "AND statement_timestamp() - pg_last_xact_replay_timestamp() > make_interval(secs => %s)",
                [AS_OF_AFTER_SECONDS],
            )
            row = cursor.fetchone()
    except DatabaseError:  # unreachable: the reads that follow say so, each in its own way
        return None
    if row is None or not row[1]:
        return None
    replayed: datetime = row[0]
    return replayed


class ReadQuerySet(models.QuerySet[_M]):
    """The queries of a model shown by the pages: inside :func:`reading`, a query that only
    reads, and names no database itself, reads the routed alias."""

    @property
    def db(self) -> str:
        # QuerySet._for_write and ._db (Django's own, which django-stubs does not declare).
        if not self._for_write and self._db is None:  # type: ignore[attr-defined]
            alias = _routed.get()
            if alias is not None:
                return alias
        return super().db


class ReadManager(models.Manager[_M]):
    """The default manager of a model shown by the pages (see :class:`ReadQuerySet`)."""

    def get_queryset(self) -> ReadQuerySet[_M]:
        return ReadQuerySet(self.model, using=self._db, hints=self._hints)  # type: ignore[attr-defined]
