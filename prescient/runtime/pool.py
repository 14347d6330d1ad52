"""Child processes that run checks for a worker, with hard timeouts.

The first children are forked from the fresh worker (one thread, no database connection:
they start in milliseconds); a replacement is a fresh interpreter (``spawn``: nothing inherited
from the worker but its settings). It is handed a *parcel*: a few jobs of one claim (as many as run in about
:data:`~prescient.engine.sweep.GROUP_SECONDS`), starts them together, runs them one at a time
and sends back each :class:`~prescient.engine.sweep.Decision` as it is made. The check's own
timeout is enforced inside the child (``SIGALRM``, as in the tick); if the child does not
answer by ``timeout + HARD_KILL_AFTER`` (a check stuck in C code), or dies (a segfault,
``os._exit``), the worker kills and replaces it, counts a failed run for the job in flight and
hands back the rest of its parcel, which never ran. Children die with their worker (``PR_SET_PDEATHSIG`` on Linux, see
:mod:`prescient.runtime.child`), so a killed worker leaves no orphan run going on behind the
stale-reservation rule.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection, wait
from typing import Any

from django.db import connections

from prescient.engine import sweep
from prescient.engine.decisions import Decision
from prescient.models import FutureJob

from .child import main as child_main

logger = logging.getLogger(__name__)

#: Seconds past a check's timeout before its child process is killed.
HARD_KILL_AFTER = 2.0


@dataclass
class Child:
    process: Any
    conn: Connection
    #: Commands to the runs of the child (read by a thread of its own): see ``interrupt``.
    control: Connection | None = None
    #: The parcel handed to it whose decisions have not come back yet; the first is in flight.
    jobs: list[FutureJob] = field(default_factory=list)
    now: datetime | None = None
    started: float = 0.0
    deadline: float = 0.0
    runs: int = 0

    @property
    def job(self) -> FutureJob | None:
        """The job whose run is in flight (None: idle)."""
        return self.jobs[0] if self.jobs else None

    def begin(self, started: float) -> None:
        """The run of the first job left began at ``started`` (monotonic): its deadline."""
        self.started = started
        if self.jobs:
            self.deadline = started + sweep.timeout_of(self.jobs[0]) + HARD_KILL_AFTER


class Pool:
    """A fixed number of child processes, each running one parcel of checks at a time.

    ``memory_mb`` caps each child's address space (a run over it fails with MemoryError and the
    child goes on); after ``max_runs`` runs a child is replaced by a fresh one.
    """

    def __init__(self, size: int, *, memory_mb: int | None = None, max_runs: int | None = None) -> None:
        self.size = size
        self.memory_mb, self.max_runs = memory_mb, max_runs
        self._context = multiprocessing.get_context("spawn")
        self.children: list[Child] = []
        # The first children are forked when that is safe (a fresh worker: one thread, no
        # database connection), so they start in milliseconds with Django already set up; a
        # replacement, later, is spawned (a fresh interpreter: nothing inherited).
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
        ours, theirs = context.Pipe()
        commands_in, commands_out = context.Pipe(duplex=False)  # the child reads, this process writes
        process = context.Process(
            target=child_main, args=(theirs, os.getpid(), self.memory_mb, commands_in), name="prescient-child",
            daemon=True,
        )
        process.start()
        theirs.close()
        commands_in.close()
        return Child(process=process, conn=ours, control=commands_out)

    @staticmethod
    def _await_ready(child: Child, timeout: float = 60.0) -> None:
        """Wait until a child has set Django up, so its start-up is not counted as run time."""
        if child.conn.poll(timeout):
            child.conn.recv()

    @property
    def idle(self) -> list[Child]:
        return [child for child in self.children if child.job is None]

    @property
    def busy(self) -> list[Child]:
        return [child for child in self.children if child.job is not None]

    def room(self, child: Child) -> int | None:
        """How many more runs ``child`` may take before it is replaced (None: no limit)."""
        return None if not self.max_runs else max(1, self.max_runs - child.runs)

    def submit(self, child: Child, jobs: list[FutureJob], now: datetime, *, started: bool = False) -> None:
        """Start and run the claimed ``jobs`` (one claim's) in ``child``, which loads what the
        runs need; ``started``: the claim started them already."""
        child.jobs, child.now = list(jobs), now
        child.begin(time.monotonic())
        child.runs += len(jobs)
        child.conn.send((jobs, now, started))

    def collect(self, timeout: float) -> list[Decision]:
        """Decisions of runs that ended within ``timeout`` seconds (killing overdue children)."""
        busy = self.busy
        if not busy:
            return []
        now_mono = time.monotonic()
        wait_for = max(0.0, min(timeout, min(c.deadline for c in busy) - now_mono))
        ready = wait([c.conn for c in busy] + [c.process.sentinel for c in busy], wait_for)
        decisions: list[Decision] = []
        for child in busy:
            if child.conn in ready:
                try:
                    while child.jobs and child.conn.poll():
                        decision = child.conn.recv()
                        decisions.append(decision)
                        if child.jobs[0].pk == decision.job.pk:  # they come back in order
                            del child.jobs[0]
                        else:
                            child.jobs = [job for job in child.jobs if job.pk != decision.job.pk]
                        child.begin(time.monotonic())
                    if not child.jobs:
                        self._free(child)
                    continue
                except (EOFError, OSError):
                    pass  # died mid-run: handled below
            if child.conn in ready or child.process.sentinel in ready:
                decisions.extend(self._replace(child, "died"))
            elif time.monotonic() >= child.deadline:
                decisions.extend(self._replace(child, "overran"))
        return decisions

    def interrupt(self, claims: set[tuple[str, int]]) -> int:
        """Ask the runs of ``claims`` (``(token, id)``) to stop, in the children that have them
        (the run in flight, or one of its parcel not started yet); returns how many were told."""
        told = 0
        for child in self.busy:
            mine = [pk for job in child.jobs for token, pk in claims if (job.reserved_by, job.pk) == (token, pk)]
            if mine:
                told += len(mine)
                self._command(child, ("stop", child.jobs[0].reserved_by, mine))
        return told

    def interrupt_all(self) -> None:
        """Ask every run in flight to stop, and the rest of each parcel not to start (the worker
        is stopping)."""
        for child in self.busy:
            self._command(child, ("all",))

    @staticmethod
    def _command(child: Child, message: tuple[Any, ...]) -> None:
        if child.control is None:
            return
        try:
            child.control.send(message)
        except (BrokenPipeError, OSError):
            pass  # it died: collect() deals with it

    def _free(self, child: Child) -> None:
        child.jobs, child.now = [], None
        if self.max_runs and child.runs >= self.max_runs:
            self._retire(child)

    def _retire(self, child: Child) -> None:
        """Replace a child that has done its runs with a fresh one."""
        try:
            child.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        child.process.join(5)
        if child.process.is_alive():
            child.process.kill()
            child.process.join(5)
        child.conn.close()
        self._close_control(child)
        fresh = self._spawn()
        self.children[self.children.index(child)] = fresh
        self._await_ready(fresh)

    def _replace(self, child: Child, why: str) -> list[Decision]:
        """Kill and replace ``child``: a failed run for the job in flight; the rest of its
        parcel never ran and is handed back."""
        job, now = child.job, child.now
        assert job is not None and now is not None
        seconds = time.monotonic() - child.started
        if child.process.is_alive():
            child.process.kill()
        child.process.join(5)
        code = child.process.exitcode
        if why == "overran":
            error = f"CheckTimeout: {job.job_exec} did not return within its timeout; its process was killed"
        else:
            error = f"ChildDied: the process running {job.job_exec} exited with code {code}"
        logger.error("job id=%s %s", job.pk, error)
        child.conn.close()
        self._close_control(child)
        rest = child.jobs[1:]
        index = self.children.index(child)
        self.children[index] = fresh = self._spawn()
        self._await_ready(fresh)
        return [sweep.failed_run(job, error, now, seconds), *(sweep.hand_back(other) for other in rest)]

    @staticmethod
    def _close_control(child: Child) -> None:
        if child.control is not None:
            child.control.close()

    def abandon(self) -> list[FutureJob]:
        """Kill every child; return the jobs they were running (to be handed back)."""
        jobs = [job for child in self.children for job in child.jobs]
        for child in self.children:
            if child.process.is_alive():
                child.process.kill()
            child.process.join(5)
            child.conn.close()
            self._close_control(child)
        self.children = []
        return jobs

    def close(self) -> None:
        for child in self.children:
            try:
                child.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for child in self.children:
            child.process.join(5)
            if child.process.is_alive():
                child.process.kill()
                child.process.join(5)
            child.conn.close()
            self._close_control(child)
        self.children = []
