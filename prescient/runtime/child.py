"""The entry point of a worker's child process, which claims, runs and settles its own parcels
(:mod:`prescient.runtime.parcels`): forked from a fresh worker (one thread, its
database connections closed first) or started with ``spawn`` (a fresh interpreter); either way
no inherited sockets, locks or threads. Kept free of model imports until Django is set up."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any


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


def _listen_for_commands(control: Connection) -> None:
    """Read what the worker tells the runs of this process (in a thread of its own, so a run in
    flight learns of it): ``("stop", token, ids)``: those runs are asked to stop (a pause, kill
    or sleep); ``("all",)``: every run is (the worker is stopping). See ``job.should_stop()``."""
    from prescient import interrupts

    # Signals stay the main thread's, as before this thread existed: a process-directed SIGALRM
    # that the run blocks must not be taken by this thread instead (which would interrupt it).
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    while True:
        try:
            message = control.recv()
        except (EOFError, OSError):
            return
        if message[0] == "all":
            interrupts.ask_all()
        elif message[0] == "stop":
            interrupts.ask(message[1], message[2])


def main(
    conn: Connection, parent: int, memory_mb: int | None, control: Connection, shared: Any, prefix: str,
    batch_size: int, queues: list[str] | None, max_runs: int | None, lanes: int = 1,
) -> None:
    """Set Django up, then claim, run and settle parcels (:mod:`prescient.runtime.parcels`)
    under tokens starting with ``prefix`` until the worker says stop."""
    _die_with_parent()
    if os.getppid() != parent:  # the worker died before prctl took effect
        os._exit(1)
    # The worker decides when to stop: a SIGINT or SIGTERM sent to the whole process group (a
    # terminal's Ctrl-C, systemd's default KillMode) must not cut the runs of its grace period.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    import django

    django.setup()
    from django.db import connections

    from .lanes import LanedRunner
    from .parcels import ParcelRunner, RunSlot

    _limit_memory(memory_mb)
    threading.Thread(target=_listen_for_commands, args=(control,), name="prescient-commands", daemon=True).start()
    conn.send(("ready",))
    try:
        if lanes > 1:
            LanedRunner(
                conn, RunSlot(shared), prefix, batch_size=batch_size, queues=queues, max_runs=max_runs, lanes=lanes,
            ).run()
        else:  # one lane: the main thread runs the jobs itself (a real SIGALRM timeout, no hand-over)
            ParcelRunner(conn, RunSlot(shared), prefix, batch_size=batch_size, queues=queues, max_runs=max_runs).run()
    finally:
        connections.close_all()
