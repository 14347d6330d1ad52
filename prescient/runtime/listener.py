"""Wake-ups: PostgreSQL LISTEN/NOTIFY so an idle worker starts work made due now at once, and a
busy one learns at once that a run in flight was paused, killed or slept (:data:`STOP_CHANNEL`).

The writer (:func:`prescient.engine.store.notify`) notifies inside its transaction; PostgreSQL
delivers the notification when (and only if) that transaction commits. Other databases have no
such thing: the worker polls them instead.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import connection

from prescient.engine.store import CHANNEL, STOP_CHANNEL, can_listen

logger = logging.getLogger(__name__)

class Listener:
    """A dedicated autocommit connection LISTENing on :data:`CHANNEL` (PostgreSQL only)."""

    def __init__(self) -> None:
        self._conn: Any = None

    @staticmethod
    def available() -> bool:
        return can_listen()

    def _connect(self) -> Any:
        import psycopg

        settings = connection.settings_dict
        params: dict[str, Any] = {
            "dbname": settings.get("NAME") or "postgres",
            "user": settings.get("USER") or None,
            "password": settings.get("PASSWORD") or None,
            "host": settings.get("HOST") or None,
            "port": settings.get("PORT") or None,
        }
        conn = psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v})
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
