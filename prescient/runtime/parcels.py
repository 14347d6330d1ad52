"""What a worker's child does for itself: claim a parcel of due jobs on its own connection, start
and run them, settle them, and ask again.

A parcel is what the child can run now: as many jobs as the runs so far say take about
:data:`~prescient.engine.sweep.GROUP_SECONDS` (:class:`~prescient.engine.sweep.Pacer`), never
more than ``BATCH_SIZE``; the claim starts them (``running``). With ``WORKER_PREFETCH`` the
child claims that many more, ``reserved``, and starts them in groups as their turn comes.
No job crosses a pipe. What the worker's main process needs to supervise the child is small
and lives in shared memory (:class:`RunSlot`): which job runs since when, under which claim,
and its timeout, so it can kill a run stuck past its timeout, charge that run and hand the rest
of the claim back. Over the pipe the child says only when it found nothing to claim
(``"idle"``, then it waits for ``"go"``) and what its parcels came to (the counts of the worker's summary).

A database fault does not cost a job anything: the child closes its connections, backs off,
reconnects and goes on. A result computed before the fault is written after the reconnect (not
run again); a job whose run had not started is handed back with nothing charged.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from django.db import InterfaceError, OperationalError, connections

from prescient import interrupts
from prescient.clock import db_now
from prescient.conf import setting
from prescient.engine import store, sweep
from prescient.engine.decisions import Decision, TickSummary
from prescient.models import FutureJob

from .backoff import Backoff

logger = logging.getLogger("prescient.runtime.worker")

DB_ERRORS = (OperationalError, InterfaceError)
#: Seconds a child keeps retrying to write what it computed when its worker is stopping.
WRITE_GIVE_UP_SECONDS = 60.0


class RunSlot:
    """The few numbers a child shares with its worker, in shared memory, for each of its lanes
    (and, with more than one, its main thread, which runs fast jobs itself: the last slot): the
    job whose code runs there (0: none), since when (monotonic seconds, one clock for every
    process of the host) and its timeout.

    No lock: each lane writes only its own three numbers (each an aligned double, written
    whole), the job last, after zeroing it, and the worker reads a lane's job again after its
    other two numbers and skips the lane when it changed meanwhile (read at its next look). A
    lock shared with the worker would be taken twice per run by every lane (at 128 lanes, a
    fifth of their time spent queueing for it), and a child killed while holding it would stop
    the worker's reads for good.
    """

    JOB, SINCE, TIMEOUT = range(3)
    WIDTH = 3

    def __init__(self, shared: Any) -> None:
        self.shared = shared  # a multiprocessing.RawArray("d", RunSlot.size(lanes))
        self.lanes = len(shared) // self.WIDTH

    @classmethod
    def size(cls, lanes: int) -> int:
        """The length of the shared array for a child of ``lanes`` lanes."""
        return cls.WIDTH * (lanes + 1 if lanes > 1 else 1)

    def _at(self, lane: int, field: int) -> int:
        return lane * self.WIDTH + field

    def running(self, job: FutureJob, lane: int = 0, timeout: float | None = None) -> None:
        at = lane * self.WIDTH
        shared = self.shared
        shared[at + self.JOB] = 0.0  # the other two are this run's before the job is
        shared[at + self.SINCE] = time.monotonic()
        shared[at + self.TIMEOUT] = sweep.timeout_of(job) if timeout is None else timeout
        shared[at + self.JOB] = float(job.pk)

    def clear(self, lane: int | None = None) -> None:
        """The run of ``lane`` (None: of every lane) is over."""
        for index in range(self.lanes) if lane is None else (lane,):
            self.shared[self._at(index, self.JOB)] = 0.0

    def read(self) -> list[tuple[int, float, float]]:
        """``(job id, since, timeout)`` of each lane running a job's code (a lane whose run
        changed while it was read is left for the next read)."""
        shared = self.shared
        runs = []
        for lane in range(self.lanes):
            at = lane * self.WIDTH
            pk = shared[at + self.JOB]
            if not pk:
                continue
            since, timeout = shared[at + self.SINCE], shared[at + self.TIMEOUT]
            if shared[at + self.JOB] == pk:
                runs.append((int(pk), since, timeout))
        return runs


class ParcelRunner:
    """The loop of one child: claim, start, run, settle, ask again, until told to stop."""

    def __init__(
        self, conn: Connection, slot: RunSlot, prefix: str, *, batch_size: int, queues: list[str] | None,
        max_runs: int | None,
    ) -> None:
        self.conn, self.slot, self.prefix = conn, slot, prefix
        self.batch_size, self.queues, self.max_runs = batch_size, queues, max_runs
        self.pacer = sweep.Pacer()
        self.prefetch = max(0, int(setting("WORKER_PREFETCH")))
        self.claims = 0
        self.runs = 0
        #: A database fault is waited out, nothing charged (at most 5 s between tries).
        self.backoff = Backoff(f"worker child {prefix}", 0.25, 5.0)
        #: Seconds after which jobs held back by a limit or rate may have room (told when idle).
        self.held: list[float] = []
        #: A parcel's results not yet written (a database fault): ``(decisions, token, now)``.
        self.unwritten: tuple[list[Decision], str, datetime] | None = None

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        while not interrupts.stopping_all():
            if self.unwritten is not None and not self._write():
                continue
            if self.max_runs and self.runs >= self.max_runs:
                return  # the worker starts a fresh child in its place
            try:
                claimed = self._parcel()
            except DB_ERRORS as exc:
                self.backoff.fault(exc)
                continue
            self.backoff.reset()
            if not claimed and not self._wait_for_work():
                return
        if self.unwritten is not None:
            deadline = time.monotonic() + WRITE_GIVE_UP_SECONDS
            while not self._write() and time.monotonic() < deadline:
                pass

    def _parcel(self) -> int:
        """Claim a parcel, run it and write its results; returns how many jobs were claimed."""
        size = self.pacer.size(self.batch_size)
        # What it can run now: the claim starts them too. With a prefetch, a few more are
        # claimed ``reserved`` and started in groups as their turn comes.
        whole = not self.prefetch
        size = min(self.batch_size, size + self.prefetch)
        self.claims += 1
        token = f"{self.prefix}/{self.claims}"
        now = db_now()
        self.held = []
        jobs = store.claim(now, size, token, self.queues, start=whole, held=self.held)
        if not jobs:
            return 0
        decisions: list[Decision] = []
        try:
            done = 0
            while done < len(jobs):
                group = jobs if whole else jobs[done:done + self.pacer.size(len(jobs) - done)]
                done += len(group)
                for decision in sweep.run_group(group, token, now, started=whole, before_run=self._before_run):
                    self.slot.clear()
                    decisions.append(decision)
                    self.pacer.record(decision)
                    self.runs += decision.ran
        except DB_ERRORS as exc:
            # The connection dropped between runs (a start, a load): what ran is written after
            # the reconnect; what had not run is handed back, nothing charged.
            self.slot.clear()
            interrupts.forget(token)
            decided = {decision.job.pk for decision in decisions}
            decisions.extend(sweep.hand_back(job) for job in jobs if job.pk not in decided)
            self.unwritten = (decisions, token, now)
            self.backoff.fault(exc)
            return len(jobs)
        # Anything else that escapes (it should not: every run ends in runner.call) ends this
        # process with the slot still naming the run in flight, so that the worker charges
        # that run and hands the rest of the claim back.
        self.slot.clear()
        interrupts.forget(token)
        self.unwritten = (decisions, token, now)
        self._write()
        return len(jobs)

    def _before_run(self, job: FutureJob) -> None:
        self.slot.running(job)

    def _write(self) -> bool:
        """Settle the parcel's results; False on a database fault (kept for the next try)."""
        assert self.unwritten is not None
        decisions, token, now = self.unwritten
        summary = TickSummary()
        try:
            store.settle(decisions, token, now, summary)
        except DB_ERRORS as exc:
            self.backoff.fault(exc)
            return False
        self.unwritten = None
        self._tell(("counts", dict(summary.counts)))
        return True

    def _wait_for_work(self) -> bool:
        """Nothing was due: say so and wait for the worker's ``"go"``; False: stop."""
        connections.close_all()  # an idle child holds no connection
        retry = min(self.held) if self.held else None  # jobs a limit or rate held back: when to look again
        self.held = []
        if not self._tell(("idle", retry)):
            return False
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            return False
        return bool(message == "go")

    def _tell(self, message: tuple[Any, ...]) -> bool:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            return False
        return True
