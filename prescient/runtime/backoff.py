"""Waiting out a database fault: every connection closed, then a wait that doubles while the
faults go on, up to a bound; the worker and its children each keep one."""

from __future__ import annotations

import logging
import time

from django.db import connections

logger = logging.getLogger("prescient.runtime.worker")  # the worker's and its children's log


class Backoff:
    """The wait after a database error: ``first`` seconds, doubled at each fault in a row, at
    most ``most``; :meth:`reset` after a step that reached the database."""

    def __init__(self, who: str, first: float, most: float) -> None:
        self.who, self.first, self.most = who, first, most
        self.seconds = 0.0

    def reset(self) -> None:
        self.seconds = 0.0

    def fault(self, exc: Exception) -> None:
        """Log ``exc``, close every connection (the next query opens a new one) and wait."""
        self.seconds = min(max(self.seconds * 2, self.first), self.most)
        logger.warning("%s: database error (%s); retrying in %.2fs", self.who, exc, self.seconds)
        for conn in connections.all():
            try:
                conn.close()
            except Exception:
                pass  # a connection already broken: it is closed enough
        time.sleep(self.seconds)
