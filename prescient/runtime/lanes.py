"""A worker child's lanes: threads that run its jobs' code side by side, while the child's main
thread claims, starts and settles parcels (Dramatiq's worker threads, procrastinate's async
worker).

Checks that wait on the world (a mail server, a carrier's API) spend their run waiting: one
process runs many of them at once on lanes, where processes would cost a Django interpreter and
a database connection each. The main thread claims as many jobs as there are free lanes (one
statement), loads what they need (one query per kind), queues them, collects each lane's
:class:`~prescient.engine.decisions.Decision` and settles them in batches (one transaction per
claim), so the cost per job falls as lanes grow. Sync code runs on the lane's thread; ``async
def`` code is awaited on the child's one event loop (:func:`prescient.engine.runner.wait_for`),
its lane waiting meanwhile: one lane budget for both.

Every run still ends in one place, :func:`prescient.engine.runner.call`, whatever it raised. A
run past its timeout is asked to stop (``job.should_stop()``), its query is cancelled and
:class:`~prescient.exceptions.CheckTimeout` is raised in its thread (which interrupts Python
code, not a call blocked in C); one that does not return by ``timeout + HARD_KILL_AFTER`` costs
its child: the worker kills it, charges that run and hands the rest of its claims back
(:mod:`prescient.runtime.pool`). Each lane has its database connection (Django's are per
thread), closed when the lane has been idle a while and when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import defaultdict
from datetime import datetime
from multiprocessing.connection import Connection

from prescient import interrupts
from prescient.clock import db_now
from prescient.engine import runner, store, sweep
from prescient.engine.decisions import Decision, TickSummary
from prescient.models import FutureJob

from .lane import Flight, Lane, run_flight
from .parcels import DB_ERRORS, WRITE_GIVE_UP_SECONDS, ParcelRunner, RunSlot

logger = logging.getLogger("prescient.runtime.worker")

#: Seconds a decision waits to be settled with others (results are written at least this often).
SETTLE_EVERY = 0.05
#: Seconds between two looks for runs past their timeout.
OVERRUN_LOOK = 0.1
#: Seconds of work kept queued beyond the busy lanes (at most a lane's worth each).
QUEUED_SECONDS = 0.5
#: Seconds of work a lane takes at once when runs are fast.
CHUNK_SECONDS = 0.005
#: Runs shorter than this on average (no-op checks) are run by the child's main thread itself.
INLINE_SECONDS = 0.001
#: Seconds before a child with runs in flight claims again after a claim found nothing (a
#: decision, or jobs held back by a limit coming free, makes it sooner).
RECLAIM_SECONDS = 0.5


class LanedRunner(ParcelRunner):
    """The loop of a child with ``lanes`` lanes: claim for the free lanes, queue, collect,
    settle in batches, until told to stop."""

    def __init__(
        self, conn: Connection, slot: RunSlot, prefix: str, *, batch_size: int, queues: list[str] | None,
        max_runs: int | None, lanes: int,
    ) -> None:
        super().__init__(conn, slot, prefix, batch_size=batch_size, queues=queues, max_runs=max_runs)
        self.size = lanes
        #: Jobs for the lanes, a few at a time when runs are fast (see _chunk), and their decisions.
        self.work: queue.Queue[list[Flight] | None] = queue.Queue()
        self.results: queue.Queue[list[tuple[Flight, Decision]]] = queue.Queue()
        #: Claimed and not decided yet, queued or running.
        self.flights: dict[int, Flight] = {}
        #: Decisions not yet written, by claim: ``(token, its now)``.
        self.unsettled: dict[tuple[str, datetime], list[Decision]] = defaultdict(list)
        #: How many decisions wait to be written, and since when the oldest of them waits.
        self._waiting = 0
        self._oldest_unsettled: float | None = None
        self._next_look = 0.0
        #: No claim before this (monotonic): the last one found nothing while runs were in flight.
        self._claim_after = 0.0
        self._limits: dict[str, threading.BoundedSemaphore] = {}
        self._limits_lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="prescient-loop", daemon=True).start()
        runner.use_loop(self.loop)
        self.lanes = [Lane(index, self) for index in range(lanes)]
        for lane in self.lanes:
            lane.start()

    def limit_for(self, job: FutureJob) -> threading.BoundedSemaphore | None:
        """What a run of ``job`` holds in this process: its check's own bound on runs at once
        (``lanes=``), if any."""
        definition = sweep.definition_of(job)
        most = getattr(definition, "lanes", None) if definition is not None else None
        if not most:
            return None
        with self._limits_lock:
            limit = self._limits.get(job.job_exec)
            if limit is None:
                limit = self._limits[job.job_exec] = threading.BoundedSemaphore(most)
        return limit

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            #: The last claim found nothing due (only then may the child say it is idle).
            exhausted = False
            while True:
                stopping = interrupts.stopping_all()
                if stopping and not self.flights:
                    break
                if not stopping and not self._ran_enough() and self._room():
                    try:
                        exhausted = not self._claim()
                    except DB_ERRORS as exc:
                        exhausted = False
                        self.backoff.fault(exc)
                    if exhausted and self.flights:  # no polling while runs are in flight
                        self._claim_after = time.monotonic() + min([RECLAIM_SECONDS, *self.held])
                self._collect()
                if not self._write(force=not self.flights) and not self.flights:
                    continue  # a database fault: waited out by _write, tried again
                if self.flights or not (exhausted or self._ran_enough()):
                    continue
                if self._ran_enough() or not self._wait_for_work():
                    break
                exhausted = False
            self._drain()
        finally:
            for _ in self.lanes:
                self.work.put(None)
            runner.use_loop(None)
            self.loop.call_soon_threadsafe(self.loop.stop)

    def _ran_enough(self) -> bool:
        return bool(self.max_runs and self.runs >= self.max_runs)

    def _headroom(self) -> int:
        """Jobs to keep queued beyond the busy lanes: what the lanes finish in about
        QUEUED_SECONDS (by the runs so far), at most as many as there are lanes: enough that no
        lane waits while the main thread writes and claims, few enough that a slow job does not
        sit claimed and unstarted."""
        mean = self.pacer.mean if self.pacer.runs else 0.0
        if mean <= 0:
            return self.size
        return max(1, min(self.size, int(self.size * QUEUED_SECONDS / mean)))

    def _room(self) -> bool:
        """Whether to claim now: when fewer than half the headroom's worth of jobs wait queued.
        A claim then takes at least that many at once (one statement, one load, and their
        decisions settled together)."""
        return len(self.flights) <= self.size + self._headroom() // 2 and time.monotonic() >= self._claim_after

    def _claim(self) -> int:
        """Claim (and start) jobs for the free lanes and the headroom, load what they need, queue
        them; for fast runs, as many as the runs so far say take about GROUP_SECONDS."""
        wanted = max(self.size + self._headroom(), self.pacer.size(self.batch_size)) - len(self.flights)
        size = min(max(self.batch_size, self.size), max(1, wanted))
        self.claims += 1
        token = f"{self.prefix}/{self.claims}"
        now = db_now()
        self.held = []
        jobs = store.claim(now, size, token, self.queues, start=True, held=self.held)
        if not jobs:
            return 0
        self.backoff.reset()
        try:
            contexts = sweep.prepare(jobs)
        except DB_ERRORS:
            # The connection dropped while loading: the claim is handed back, nothing charged.
            for job in jobs:
                self._unsettle(token, now, sweep.hand_back(job))
            raise
        flights = [Flight(job=job, context=contexts.get(job.pk), token=token, now=now) for job in jobs]
        for flight in flights:
            self.flights[flight.job.pk] = flight
        if self._fast():
            self._run_here(flights)
            return len(jobs)
        chunk = self._chunk()
        for first in range(0, len(flights), chunk):
            self.work.put(flights[first:first + chunk])
        return len(jobs)

    def _fast(self) -> bool:
        """Whether the runs so far are so fast (no-op checks) that handing them to the lanes
        would cost more than running them here, in the main thread, one after the other."""
        return bool(self.pacer.runs) and self.pacer.mean < INLINE_SECONDS

    def _run_here(self, flights: list[Flight]) -> None:
        """Run ``flights`` in the main thread, as a child of one lane does (a real SIGALRM
        timeout); a run slower than the others makes the next claim go to the lanes again. A job
        whose check's ``lanes=`` is taken by a lane goes to the lanes: the main thread never waits."""
        here = self.slot.lanes - 1
        for flight in flights:
            limit = self.limit_for(flight.job)
            if limit is not None and not limit.acquire(blocking=False):
                self.work.put([flight])
                continue
            self._decided(flight, run_flight(self, flight, here, limit))

    def _chunk(self) -> int:
        """Jobs a lane takes at once: runs so fast that handing them over one by one would cost
        more than they do (no-op checks) go a few at a time, about CHUNK_SECONDS of work."""
        mean = self.pacer.mean if self.pacer.runs else 0.0
        if mean <= 0 or mean >= CHUNK_SECONDS:
            return 1
        return max(1, min(64, int(CHUNK_SECONDS / mean)))

    def _collect(self) -> None:
        """Take the lanes' decisions (waiting for one at most until the next thing to do), and
        interrupt the runs past their timeout (looked at every OVERRUN_LOOK seconds)."""
        wait = self._until_next()
        try:
            decided = self.results.get(timeout=wait) if wait > 0 else self.results.get_nowait()
        except queue.Empty:
            decided = []
        while decided:
            for flight, decision in decided:
                self._decided(flight, decision)
            try:
                decided = self.results.get_nowait()
            except queue.Empty:
                break
        if time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + OVERRUN_LOOK
            self._interrupt_overruns()

    def _decided(self, flight: Flight, decision: Decision) -> None:
        self.flights.pop(flight.job.pk, None)
        self._claim_after = 0.0  # a lane is free: claim again
        self._unsettle(flight.token, flight.now, decision)
        self.pacer.record(decision)
        self.runs += decision.ran

    def _unsettle(self, token: str, claimed_at: datetime, decision: Decision) -> None:
        """Keep ``decision`` to be written with the others of its claim."""
        if self._oldest_unsettled is None:
            self._oldest_unsettled = time.monotonic()
        self._waiting += 1
        self.unsettled[(token, claimed_at)].append(decision)

    def _until_next(self) -> float:
        """Seconds until something needs the main thread without a result coming: decisions to
        write, a look for runs past their timeout; 0 when a claim would find room."""
        if not self.flights:
            return 0.0
        now = time.monotonic()
        soonest = min(1.0, self._next_look - now)
        if self._oldest_unsettled is not None:
            soonest = min(soonest, self._oldest_unsettled + SETTLE_EVERY - now)
        return max(0.0, soonest)

    def _interrupt_overruns(self) -> None:
        now = time.monotonic()
        for flight in self.flights.values():
            if flight.started and not flight.interrupted and now > flight.started + flight.timeout:
                flight.interrupted = True
                interrupts.ask(flight.token, [flight.job.pk])  # job.should_stop(), for cooperative code
                for lane in self.lanes:
                    if lane.interrupt(flight):
                        logger.warning(
                            "job id=%s (%s) ran past its timeout of %gs: interrupted", flight.job.pk,
                            flight.job.job_exec, flight.timeout,
                        )
                        break

    def _write(self, *, force: bool = False) -> bool:
        """Settle the decisions that have waited long enough (all of them with ``force``, or
        when many are waiting); False on a database fault (kept for the next try)."""
        if not self._waiting:
            return True
        oldest = self._oldest_unsettled or 0.0
        many = self._waiting >= max(self.size, self.batch_size)
        if not (force or many or time.monotonic() - oldest >= SETTLE_EVERY):
            return True
        summary = TickSummary()
        for key in list(self.unsettled):
            token, claimed_at = key
            decisions = self.unsettled[key]
            if not decisions:
                del self.unsettled[key]
                continue
            try:
                store.settle(decisions, token, claimed_at, summary)
            except DB_ERRORS as exc:
                self.backoff.fault(exc)
                self._tell(("counts", dict(summary.counts)))
                return False
            del self.unsettled[key]
            self._waiting -= len(decisions)
            if not any(flight.token == token for flight in self.flights.values()):
                interrupts.forget(token)
        self._oldest_unsettled = None if not self._waiting else time.monotonic()
        self._tell(("counts", dict(summary.counts)))
        return True

    def _drain(self) -> None:
        """The child is stopping, its runs in flight all ended (run() waits for them; the queued
        ones were handed back by their lanes): everything is written, for at most a minute."""
        deadline = time.monotonic() + WRITE_GIVE_UP_SECONDS
        while not self._write(force=True) and time.monotonic() < deadline:
            pass
