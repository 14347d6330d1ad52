"""Statements counted in every process of a bench run, each into a file of its own
(``BENCH_STATEMENTS_DIR``, bench/settings.py): ``python -m bench --only load``.

pg_stat_statements is not assumed (it needs ``shared_preload_libraries``, a server restart), so
the statements the primary receives are counted where they are sent: Django's
``execute_wrapper`` on every connection a process opens (each thread's, the lanes' and the
heartbeat's included), an ``executemany`` counting once. A worker's children are forked or
spawned: each process (by pid) writes its own running total, 8 bytes at offset 0 of
``<dir>/<pid>-<random>``, at every statement, so the files are current whenever they are read
and a process that dies leaves its total behind. Not counted: the listener's own connection
(``LISTEN`` twice when it connects; notifications are not statements) and what psycopg sends
by itself (``BEGIN``, ``COMMIT``), as in the sweep section's count.
"""

from __future__ import annotations

import os
import struct
import threading
import uuid
from pathlib import Path
from typing import Any


class FileCounter:
    """An execute wrapper that counts statements into this process's file."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.lock = threading.Lock()
        self.pid = 0
        self.fd = -1
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        with self.lock:
            pid = os.getpid()
            if pid != self.pid:  # a forked child starts from zero, in a file of its own
                self.pid, self.count = pid, 0
                self.fd = os.open(self.directory / f"{pid}-{uuid.uuid4().hex[:8]}", os.O_RDWR | os.O_CREAT, 0o644)
            self.count += 1
            os.pwrite(self.fd, struct.pack("<q", self.count), 0)
        return execute(sql, params, many, context)


def total(directory: str | Path) -> int:
    """The statements counted so far by every process that wrote into ``directory``."""
    found = 0
    for path in Path(directory).iterdir():
        data = path.read_bytes()[:8]
        if len(data) == 8:
            found += struct.unpack("<q", data)[0]
    return found


_counter: FileCounter | None = None


def install(directory: str) -> None:
    """Count every statement this process sends from now on, on every connection it opens."""
    global _counter  # noqa: PLW0603 (one counter per process)
    from django.db import connections
    from django.db.backends.signals import connection_created

    if _counter is not None:
        return
    _counter = FileCounter(directory)

    def wrap(sender: Any, connection: Any, **kwargs: Any) -> None:
        if _counter not in connection.execute_wrappers:
            connection.execute_wrappers.append(_counter)

    connection_created.connect(wrap, weak=False, dispatch_uid="bench-count-statements")
    for conn in connections.all(initialized_only=True):  # those opened already
        wrap(None, conn)
