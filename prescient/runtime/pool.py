"""A worker's child processes, supervised: each claims, runs and settles its own parcels
(:mod:`prescient.runtime.parcels`); the worker's main process only watches them.

The first children are forked from the fresh worker (one thread, no database connection: they
start in milliseconds); a replacement is a fresh interpreter (``spawn``: nothing inherited from
the worker but its settings). Each child shares a :class:`~prescient.runtime.parcels.RunSlot`
with the worker: which job runs since when. The check's own timeout is enforced inside the
child (``SIGALRM``, as in the tick); a child that does not return by ``timeout +
HARD_KILL_AFTER`` (a check stuck in C code) or dies (a segfault, ``os._exit``) is killed and
replaced, the run in flight is charged a failed run and the rest of its claim is handed back
(results the child had computed and not yet written are lost with it: those jobs run again).
Children die with their worker (``PR_SET_PDEATHSIG`` on Linux, see
:mod:`prescient.runtime.child`), so a killed worker leaves no orphan run going on behind the
stale-claim rule.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection, wait
from typing import Any

from django.db import connections

from prescient.engine import sweep
from prescient.engine.decisions import Decision
from prescient.exceptions import CheckTimeout, ChildDied
from prescient.models import FutureJob

from .child import main as child_main
from .parcels import RunSlot

logger = logging.getLogger(__name__)

#: Seconds past a check's timeout before its child process is killed.
HARD_KILL_AFTER = 2.0


@dataclass
class Child:
    process: Any
    conn: Connection
    #: Commands to the runs of the child (read by a thread of its own): see ``interrupt``.
    control: Connection
    slot: RunSlot
    #: Every claim of the child has a token starting with this.
    prefix: str
    #: It found nothing to claim and waits for ``"go"``.
    idle: bool = False
    #: It was told to stop (it exits once its parcel is written).
    stopped: bool = False


#: ``(token, decisions)``: what the worker writes for a child it killed or lost.
Charges = list[tuple[str, list[Decision]]]


class Pool:
    """``size`` child processes, each claiming for itself under tokens ``<token>/<n>/<claim>``.

    ``memory_mb`` caps each child's address space (a run over it fails with MemoryError and the
    child goes on); after ``max_runs`` runs a child leaves and a fresh one takes its place.
    """

    def __init__(
        self, size: int, *, token: str, batch_size: int, queues: list[str] | None = None,
        memory_mb: int | None = None, max_runs: int | None = None, lanes: int = 1,
    ) -> None:
        self.size, self.token, self.lanes = size, token, max(1, lanes)
        self.batch_size, self.queues = batch_size, queues
        self.memory_mb, self.max_runs = memory_mb, max_runs
        self._context = multiprocessing.get_context("spawn")
        self._serial = 0
        #: When an idle child should look again for jobs a limit or rate held back (monotonic).
        self.retry_at: float | None = None
        self.children: list[Child] = []
        first = self._fork_context()
        for _ in range(size):
            self.children.append(self._spawn(first))
        for child in self.children:
            self._await_ready(child)

    @staticmethod
    def _fork_context() -> Any:
        """The ``fork`` context if forking now is safe, else None."""
        if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
            return None
        connections.close_all()  # a child must never share a database socket with the worker
        return multiprocessing.get_context("fork")

    def _spawn(self, context: Any = None) -> Child:
        context = context or self._context
        self._serial += 1
        prefix = f"{self.token}/{self._serial}"
        ours, theirs = context.Pipe()
        commands_in, commands_out = context.Pipe(duplex=False)  # the child reads, this process writes
        shared = context.RawArray("d", RunSlot.size(self.lanes))  # lock-free: see RunSlot
        process = context.Process(
            target=child_main,
            args=(theirs, os.getpid(), self.memory_mb, commands_in, shared, prefix, self.batch_size, self.queues,
                  self.max_runs, self.lanes),
            name="prescient-child", daemon=True,
        )
        process.start()
        theirs.close()
        commands_in.close()
        return Child(process=process, conn=ours, control=commands_out, slot=RunSlot(shared), prefix=prefix)

    @staticmethod
    def _await_ready(child: Child, timeout: float = 60.0) -> None:
        """Wait until a child has set Django up."""
        if child.conn.poll(timeout):
            try:
                child.conn.recv()
            except (EOFError, OSError):
                pass  # died at start-up: check() replaces it

    # --- watching ----------------------------------------------------------------------------

    @property
    def all_idle(self) -> bool:
        return all(child.idle for child in self.children)

    def has_idle(self) -> bool:
        return any(child.idle for child in self.children)

    def wait(self, timeout: float, also: Sequence[Any] = ()) -> list[Any]:
        """Block up to ``timeout`` seconds (less when a run's hard deadline comes first) until a
        child says something or ends, or one of ``also`` is ready; returns what is ready."""
        deadline = self._next_deadline()
        if deadline is not None:
            timeout = min(timeout, max(0.0, deadline - time.monotonic()))
        handles = [c.conn for c in self.children] + [c.process.sentinel for c in self.children] + list(also)
        return list(wait(handles, max(0.0, timeout)))

    def _next_deadline(self) -> float | None:
        deadlines: list[float] = []
        for child in self.children:
            deadlines.extend(since + timeout + HARD_KILL_AFTER for _, since, timeout in child.slot.read())
        return min(deadlines) if deadlines else None

    def read(self) -> Counter[str]:
        """What the children said (without waiting): the counts of their parcels; marks the
        idle ones."""
        counts: Counter[str] = Counter()
        for child in self.children:
            try:
                while child.conn.poll():
                    message = child.conn.recv()
                    if message[0] == "idle":
                        child.idle = True
                        if len(message) > 1 and message[1] is not None:  # jobs held back by a limit
                            retry = time.monotonic() + float(message[1])
                            self.retry_at = retry if self.retry_at is None else min(self.retry_at, retry)
                    elif message[0] == "counts":
                        counts.update(message[1])
            except (EOFError, OSError):
                continue  # it ended: check() deals with it
        return counts

    def wake(self) -> int:
        """Tell the idle children to look for work; returns how many were told."""
        told = 0
        for child in self.children:
            if child.idle and not child.stopped:
                child.idle = False
                try:
                    child.conn.send("go")
                    told += 1
                except (BrokenPipeError, OSError):
                    pass
        return told

    def check(self, clock: Callable[[], datetime]) -> Charges:
        """Kill the children with a run past its hard deadline, replace those killed or ended;
        returns what to write for the claims they held: a run past its deadline is charged
        (CheckTimeout), the runs in flight of a child that died are charged (ChildDied: which of
        them ended it is not known), every other job of their claims is handed back."""
        charges: Charges = []
        for child in list(self.children):
            runs = child.slot.read()
            if not child.process.is_alive():
                child.process.join(1)
                code = child.process.exitcode
                if code != 0 or runs:
                    died = ChildDied(f"its process exited with code {code}")
                    charges.extend(self._charge(child, clock(), {pk: died for pk, _, _ in runs}))
                self._replace(child)
                continue
            late = {pk: timeout for pk, since, timeout in runs if time.monotonic() > since + timeout + HARD_KILL_AFTER}
            if late:
                child.process.kill()
                child.process.join(5)
                charges.extend(self._charge(child, clock(), {
                    pk: CheckTimeout(
                        f"the check did not return within its timeout of {timeout:g}s; its process was killed"
                    ) for pk, timeout in late.items()
                }))
                self._replace(child)
        return charges

    def _charge(self, child: Child, now: datetime, errors: dict[int, BaseException]) -> Charges:
        """The claims ``child`` held when it ended: each run of ``errors`` fails with its error;
        every other job of its claims is handed back, nothing charged."""
        since = {pk: started for pk, started, _ in child.slot.read()}
        by_token: dict[str, list[Decision]] = {}
        for job in FutureJob.objects.filter(reserved_by__startswith=f"{child.prefix}/").order_by("pk"):
            error = errors.get(job.pk)
            if error is not None:
                logger.error("job id=%s %s: %s (%s)", job.pk, type(error).__name__, error, job.job_exec)
                seconds = time.monotonic() - since[job.pk] if job.pk in since else 0.0
                decision = sweep.failed_run(job, error, now, seconds)
            else:
                decision = sweep.hand_back(job)
            by_token.setdefault(job.reserved_by, []).append(decision)
        child.slot.clear()
        return list(by_token.items())

    def _replace(self, child: Child) -> None:
        self._close(child)
        if child.stopped:
            self.children.remove(child)
            return
        fresh = self._spawn()
        self.children[self.children.index(child)] = fresh
        self._await_ready(fresh)

    @staticmethod
    def _close(child: Child) -> None:
        for end in (child.conn, child.control):
            try:
                end.close()
            except OSError:
                pass

    # --- commands ----------------------------------------------------------------------------

    def interrupt(self, claims: set[tuple[str, int]]) -> int:
        """Ask the runs of ``claims`` (``(token, id)``) to stop, in the children that hold
        them; returns how many were told."""
        told = 0
        for child in self.children:
            mine = [(token, pk) for token, pk in claims if token.startswith(f"{child.prefix}/")]
            for token in {token for token, _ in mine}:
                self._command(child, ("stop", token, [pk for t, pk in mine if t == token]))
            told += len(mine)
        return told

    @staticmethod
    def _command(child: Child, message: tuple[Any, ...]) -> None:
        try:
            child.control.send(message)
        except (BrokenPipeError, OSError):
            pass  # it died: check() deals with it

    # --- stopping ----------------------------------------------------------------------------

    def stop(
        self, grace_seconds: float, now: datetime, on_counts: Any, *, cold: Callable[[], bool] = lambda: False,
        also: Sequence[Any] = (),
    ) -> Charges:
        """Ask every child to stop: runs in flight are asked to stop (``job.should_stop()``),
        nothing more starts, each writes what it has and leaves. A child still running after
        ``grace_seconds``, or when ``cold()`` turns true (a second signal: ``also`` holds what
        wakes this wait for it), is killed and its claims are handed back uncharged, each run it
        cut logged. Returns what to write."""
        for child in self.children:
            child.stopped = True
            self._command(child, ("all",))
            try:
                child.conn.send(None)  # read when it is (or next becomes) idle
            except (BrokenPipeError, OSError):
                pass
        until = time.monotonic() + grace_seconds
        while any(child.process.is_alive() for child in self.children) and time.monotonic() < until and not cold():
            ready = self.wait(min(0.5, max(0.0, until - time.monotonic())), also)
            for handle in ready:
                if handle in also and isinstance(handle, socket.socket):
                    try:
                        handle.recv(512)  # a signal's wake-up byte
                    except OSError:
                        pass
            on_counts(self.read())
        on_counts(self.read())
        charges: Charges = []
        why = "a second signal" if cold() else "the end of the grace period"
        for child in list(self.children):
            lingering = child.process.is_alive()
            runs = child.slot.read()
            if lingering:
                child.process.kill()
                for pk, _, _ in runs:
                    logger.warning("job id=%s: its run was cut by %s and is handed back uncharged", pk, why)
            child.process.join(5)
            code = child.process.exitcode
            if lingering:
                held = self._charge(child, now, {})
                logger.warning(
                    "a child did not finish before %s; its %s claimed jobs are handed back (any that had "
                    "run and were not yet written run again)", why, sum(len(decisions) for _, decisions in held),
                )
                charges.extend(held)
            elif code != 0:  # it died during the grace period: its runs in flight ended it
                died = ChildDied(f"its process exited with code {code}")
                charges.extend(self._charge(child, now, {pk: died for pk, _, _ in runs}))
            self._close(child)
        self.children = []
        return charges

    def abandon(self) -> None:
        """Kill every child at once (nothing written: the stale-claim rule takes over)."""
        for child in self.children:
            if child.process.is_alive():
                child.process.kill()
            child.process.join(5)
            self._close(child)
        self.children = []
