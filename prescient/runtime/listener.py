"""Wake-ups: PostgreSQL LISTEN/NOTIFY so an idle worker starts work made due now at once, and a
busy one learns at once that a run in flight was paused, killed or slept (:data:`STOP_CHANNEL`).

The writer (:func:`prescient.engine.store.notify`) notifies inside its transaction; PostgreSQL
delivers the notification when (and only if) that transaction commits. Other databases have no
such thing: the worker polls them instead.

The listener's connection is opened with the parameters Django would use for the alias
``PRESCIENT["LISTEN_DATABASE"]`` (None: the default database), ``OPTIONS`` included
(``sslmode``, ``options``, ``application_name``, a ``service``...): the alias's
``get_connection_params()``, less what only Django's cursors use. Behind a pooler in transaction
mode a ``LISTEN`` hears nothing (its server connection goes back to the pool), so a deployment
points ``LISTEN_DATABASE`` at an alias that connects directly, or through a session-mode pool,
to the same database (docs/operations.md, "PgBouncer").
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from prescient.conf import setting
from prescient.engine.store import CHANNEL, STOP_CHANNEL, can_listen

logger = logging.getLogger(__name__)


def listen_alias() -> str:
    """The alias whose connection parameters the listener uses: ``LISTEN_DATABASE``, or the default."""
    alias = setting("LISTEN_DATABASE")
    return DEFAULT_DB_ALIAS if alias is None else str(alias)


def connection_params(alias: str) -> dict[str, Any]:
    """What psycopg is given to connect to ``alias`` as Django does (its ``NAME``, ``USER``,
    ``PASSWORD``, ``HOST``, ``PORT`` and ``OPTIONS``; a ``pool`` of ``OPTIONS`` is Django's, not
    a connection's), less Django's cursor class and adapters: the listener runs no query of the ORM."""
    params = dict(connections[alias].get_connection_params())
    for key in ("cursor_factory", "context"):
        params.pop(key, None)
    return params


class Listener:
    """A dedicated autocommit connection LISTENing on :data:`CHANNEL` (PostgreSQL only), to the
    database of ``alias`` (default: :func:`listen_alias`)."""

    def __init__(self, alias: str | None = None) -> None:
        self._conn: Any = None
        self.alias = listen_alias() if alias is None else alias

    @staticmethod
    def available() -> bool:
        return can_listen() and connections[listen_alias()].vendor == "postgresql"

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(autocommit=True, **connection_params(self.alias))
        conn.execute(f"LISTEN {CHANNEL}")
        conn.execute(f"LISTEN {STOP_CHANNEL}")
        return conn

    def socket(self) -> Any:
        """What to wait on for a notification (it has a ``fileno()``); None without a connection."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            return self._conn
        except Exception as exc:
            logger.warning("listener connection failed (%s); polling until it is back", exc)
            self.close()
            return None

    def drain(self) -> set[str] | None:
        """The channels notified since the last look, without waiting (None: no connection,
        so nothing can be known: poll)."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            return {note.channel for note in self._conn.notifies(timeout=0)}
        except Exception as exc:
            logger.warning("listener connection failed (%s); polling until it is back", exc)
            self.close()
            return None

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a notification; True if one came.

        A broken connection is dropped and the wait falls back to sleeping; the next call
        reconnects.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            woken = False
            for _ in self._conn.notifies(timeout=max(timeout, 0.0), stop_after=1):
                woken = True
            return woken
        except Exception as exc:
            logger.warning("listener connection failed (%s); polling until it is back", exc)
            self.close()
            time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
            return False

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = None
