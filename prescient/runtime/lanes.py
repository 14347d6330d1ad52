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
import ctypes
import logging
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from django.db import connections

from prescient import interrupts
from prescient.clock import db_now
from prescient.engine import runner, store, sweep
from prescient.engine.decisions import Decision
from prescient.exceptions import CheckTimeout
from prescient.models import FutureJob

from .parcels import DB_ERRORS, ParcelRunner, RunSlot

logger = logging.getLogger("prescient.runtime.worker")

#: Seconds a lane waits for work before it closes its database connection.
IDLE_CLOSE_SECONDS = 5.0
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


@dataclass(eq=False)
class Flight:
    """One claimed job on its way through a lane."""

    job: FutureJob
    context: Any
    token: str
    claim: int
    now: datetime
    #: When its lane began its run (monotonic; 0: still queued).
    started: float = 0.0
    timeout: float = 0.0
    #: Its soft timeout fired (CheckTimeout raised in its lane).
    interrupted: bool = False


class Lane(threading.Thread):
    """One lane: takes a job from the child's queue, runs it, hands its decision back."""

    def __init__(self, index: int, owner: LanedRunner) -> None:
        super().__init__(name=f"prescient-lane-{index}", daemon=True)
        self.index, self.owner = index, owner
        self.lock = threading.Lock()
        self.flight: Flight | None = None
        #: A CheckTimeout was sent to this thread and may not have been raised yet.
        self.pending = False
        self.database: Any = None

    def run(self) -> None:
        try:
            while True:
                try:
                    chunk = self.owner.work.get(timeout=IDLE_CLOSE_SECONDS)
                except queue.Empty:
                    connections.close_all()  # this thread's: an idle lane holds no connection
                    continue
                if chunk is None:
                    return
                decided = []
                for flight in chunk:
                    try:
                        decision = self._run(flight)
                    except BaseException as exc:  # a CheckTimeout that landed outside the run's code
                        self._leave()
                        decision = sweep.failed_run(flight.job, _as_timeout(exc, flight), flight.now,
                                                    time.monotonic() - flight.started)
                    decided.append((flight, decision))
                self.owner.results.put(decided)
        finally:
            connections.close_all()

    def _run(self, flight: Flight) -> Decision:
        job = flight.job
        if interrupts.stopping_all():
            return sweep.hand_back(job)  # the worker is stopping: not started
        with self.owner.limit_for(job):
            with self.lock:
                flight.started, flight.timeout = time.monotonic(), sweep.timeout_of(job)
                self.flight, self.database = flight, connections["default"]
            self.owner.slot.running(job, flight.claim, lane=self.index)
            try:
                return sweep.run_one(job, flight.context, flight.now)
            finally:
                self._leave()

    def _leave(self) -> None:
        """The run is over: nothing may interrupt this thread for it any more."""
        with self.lock:
            self.flight = None
            if self.pending:  # sent, not raised yet: withdrawn
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.ident or 0), None)
                self.pending = False
        self.owner.slot.clear(self.index)
        if self.database is not None and self.database.connection is not None and self.database.errors_occurred:
            if not self.database.is_usable():
                self.database.close()
            self.database.errors_occurred = False

    def interrupt(self, flight: Flight) -> bool:
        """The run of ``flight`` overran its timeout: cancel its query and raise CheckTimeout in
        its thread, if it is still this lane's run. Returns whether it was."""
        with self.lock:
            if self.flight is not flight or self.ident is None:
                return False
            _cancel_query(self.database)
            self.pending = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.ident), ctypes.py_object(CheckTimeout))
            return True


def _cancel_query(database: Any) -> None:
    """Ask PostgreSQL to cancel the query a lane's connection waits on (from another thread)."""
    raw = getattr(database, "connection", None)
    if raw is None or database.vendor != "postgresql":
        return
    try:
        from psycopg.pq import TransactionStatus

        if raw.info.transaction_status == TransactionStatus.ACTIVE:
            raw.cancel_safe(timeout=2.0)
    except Exception:  # best effort
        logger.warning("could not cancel the query of a timed-out run", exc_info=True)


def _as_timeout(exc: BaseException, flight: Flight) -> BaseException:
    if isinstance(exc, CheckTimeout):
        return CheckTimeout(f"{flight.job.job_exec} ran longer than its timeout of {flight.timeout:g}s")
    return exc


class _Limit:
    """At most ``most`` runs of one check at a time in this process (``lanes=`` of a check)."""

    def __init__(self, most: int) -> None:
        self.semaphore = threading.BoundedSemaphore(most)

    def __enter__(self) -> None:
        self.semaphore.acquire()

    def __exit__(self, *exc: object) -> None:
        self.semaphore.release()


class _Free:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_FREE = _Free()


@dataclass
class _Unsettled:
    """Decisions of one claim not yet written."""

    decisions: list[Decision] = field(default_factory=list)


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
        self.unsettled: dict[tuple[str, datetime], _Unsettled] = defaultdict(_Unsettled)
        #: How many decisions wait to be written, and since when the oldest of them waits.
        self._waiting = 0
        self._oldest_unsettled: float | None = None
        self._next_look = 0.0
        self._limits: dict[str, _Limit] = {}
        self._limits_lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="prescient-loop", daemon=True).start()
        runner.use_loop(self.loop)
        self.lanes = [Lane(index, self) for index in range(lanes)]
        for lane in self.lanes:
            lane.start()

    def limit_for(self, job: FutureJob) -> Any:
        """What a lane holds while it runs ``job``: its check's own bound on runs at once, if any."""
        definition = sweep.definition_of(job)
        most = getattr(definition, "lanes", None) if definition is not None else None
        if not most:
            return _FREE
        with self._limits_lock:
            limit = self._limits.get(job.job_exec)
            if limit is None:
                limit = self._limits[job.job_exec] = _Limit(most)
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
        return len(self.flights) <= self.size + self._headroom() // 2

    def _claim(self) -> int:
        """Claim (and start) jobs for the free lanes and the headroom, load what they need, queue
        them; for fast runs, as many as the runs so far say take about GROUP_SECONDS."""
        wanted = max(self.size + self._headroom(), self.pacer.size(self.batch_size)) - len(self.flights)
        size = min(max(self.batch_size, self.size), max(1, wanted))
        self.claims += 1
        token = f"{self.prefix}/{self.claims}"
        self.slot.claiming(self.claims)
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
        flights = [Flight(job=job, context=contexts.get(job.pk), token=token, claim=self.claims, now=now)
                   for job in jobs]
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
        timeout); a run slower than the others makes the next claim go to the lanes again."""
        here = self.slot.lanes - 1
        for flight in flights:
            job = flight.job
            if interrupts.stopping_all():
                decision = sweep.hand_back(job)
            else:
                with self.limit_for(job):
                    flight.started, flight.timeout = time.monotonic(), sweep.timeout_of(job)
                    self.slot.running(job, flight.claim, lane=here)
                    try:
                        decision = sweep.run_one(job, flight.context, flight.now)
                    finally:
                        self.slot.clear(here)
            self._decided(flight, decision)

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
        self._unsettle(flight.token, flight.now, decision)
        self.pacer.record(decision)
        self.runs += decision.ran

    def _unsettle(self, token: str, claimed_at: datetime, decision: Decision) -> None:
        """Keep ``decision`` to be written with the others of its claim."""
        if self._oldest_unsettled is None:
            self._oldest_unsettled = time.monotonic()
        self._waiting += 1
        self.unsettled[(token, claimed_at)].decisions.append(decision)

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
        if not (force or self._waiting >= max(self.size, self.batch_size) or time.monotonic() - oldest >= SETTLE_EVERY):
            return True
        from prescient.engine.decisions import TickSummary

        summary = TickSummary()
        for key in list(self.unsettled):
            token, claimed_at = key
            decisions = self.unsettled[key].decisions
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
        """The child is stopping: the runs in flight end (asked to stop), the queued ones are
        handed back by their lanes; everything is written (for at most a minute)."""
        from .parcels import WRITE_GIVE_UP_SECONDS

        while self.flights:
            self._collect()
            self._write()
        deadline = time.monotonic() + WRITE_GIVE_UP_SECONDS
        while not self._write(force=True) and time.monotonic() < deadline:
            pass
