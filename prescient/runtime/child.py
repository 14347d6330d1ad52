"""The entry point of a worker's child process: forked from a fresh worker (one thread, its
database connections closed first) or started with ``spawn`` (a fresh interpreter); either way
no inherited sockets, locks or threads. Kept free of model imports until Django is set up."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from multiprocessing.connection import Connection


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the worker
        except OSError:  # pragma: no cover - not glibc
            pass


def drop_broken_connections() -> None:
    """Close connections that saw an error and no longer answer (e.g. the database restarted)."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred and not conn.is_usable():
            conn.close()
        conn.errors_occurred = False


def _limit_memory(megabytes: int | None) -> None:
    """Cap this process's address space: an allocation over it raises MemoryError in the check."""
    if not megabytes:
        return
    import resource

    limit = int(megabytes) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(conn: Connection, parent: int, memory_mb: int | None = None) -> None:
    _die_with_parent()
    if os.getppid() != parent:  # the worker died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    import django

    django.setup()
    from django.db import connections

    from prescient.engine import sweep

    _limit_memory(memory_mb)
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        drop_broken_connections()
        jobs, now, started = message
        # A parcel of jobs of one claim: started together, run one after the other, each
        # decision sent as soon as it is made (the worker watches each run's timeout).
        for decision in sweep.run_group(jobs, jobs[0].reserved_by, now, started=started):
            try:
                conn.send(decision)
            except Exception as exc:  # an unpicklable piece of a decision: report it plainly
                conn.send(sweep.failed_run(decision.job, f"{type(exc).__name__}: {exc}", now, decision.seconds))
    connections.close_all()
