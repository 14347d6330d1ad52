"""One lane of a worker's child: a thread that takes claimed jobs from its child's queue, runs
each through :func:`prescient.engine.sweep.run_one` (every run ends in
:func:`prescient.engine.runner.call`, whatever it raised) and hands the decisions back to the
child's main thread (:mod:`prescient.runtime.lanes`).

A run past its timeout is interrupted from the main thread (:meth:`Lane.interrupt`): its query
is cancelled and :class:`~prescient.exceptions.CheckTimeout` raised in its thread, only while it
is still that run's (the lane's lock), and withdrawn if not raised by the time the run ends.
Each lane has its own database connection (Django's are per thread): closed when the lane has
been idle a while and when it ends, and replaced when a run left it broken or inside a
transaction.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import queue
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections

from prescient import interrupts
from prescient.engine import sweep
from prescient.engine.decisions import Decision
from prescient.exceptions import CheckTimeout
from prescient.models import FutureJob

if TYPE_CHECKING:
    from .lanes import LanedRunner

logger = logging.getLogger("prescient.runtime.worker")

#: Seconds a lane waits for work before it closes its database connection.
IDLE_CLOSE_SECONDS = 5.0


@dataclass(eq=False)
class Flight:
    """One claimed job on its way through a lane."""

    job: FutureJob
    context: Any
    token: str
    now: datetime
    #: When its run began (monotonic; 0: still queued) and its timeout.
    started: float = 0.0
    timeout: float = 0.0
    #: Its soft timeout fired (CheckTimeout raised in its lane).
    interrupted: bool = False
    #: What its run came to, as soon as it is known (kept if a CheckTimeout lands just after).
    decision: Decision | None = None


def run_flight(owner: LanedRunner, flight: Flight, slot: int, limit: threading.BoundedSemaphore | None) -> Decision:
    """Run ``flight`` on run slot ``slot`` (the worker watches it for a run stuck past its
    timeout), holding ``limit`` (its check's ``lanes=``, acquired by the caller) if any."""
    job = flight.job
    try:
        if interrupts.stopping_all():  # (looked at after waiting for ``limit``, too)
            return sweep.hand_back(job)  # the worker is stopping: not started
        flight.timeout = sweep.timeout_of(job)
        flight.started = time.monotonic()
        owner.slot.running(job, slot, flight.timeout)
        flight.decision = sweep.run_one(job, flight.context, flight.now)
        return flight.decision
    finally:
        if flight.started:
            owner.slot.clear(slot)
        if limit is not None:
            limit.release()


class Lane(threading.Thread):
    """One lane: takes jobs from the child's queue, runs them, hands their decisions back."""

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
                self.owner.results.put([(flight, self._run(flight)) for flight in chunk])
        finally:
            connections.close_all()

    def _run(self, flight: Flight) -> Decision:
        try:
            limit = self.owner.limit_for(flight.job)
            if limit is not None:
                limit.acquire()  # released by run_flight
            with self.lock:
                self.flight, self.database = flight, connections[DEFAULT_DB_ALIAS]
            try:
                return run_flight(self.owner, flight, self.index, limit)
            finally:
                self._leave()
        except BaseException as exc:  # a CheckTimeout that landed outside the run's own code
            self._leave()
            if flight.decision is not None:
                return flight.decision  # it had come to something: that stands
            return sweep.failed_run(flight.job, _as_timeout(exc, flight), flight.now, time.monotonic() - flight.started)

    def _leave(self) -> None:
        """The run is over: nothing may interrupt this thread for it any more; a connection it
        left broken or inside a transaction is replaced."""
        with self.lock:
            self.flight = None
            if self.pending:  # sent, not raised yet: withdrawn
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.ident or 0), None)
                self.pending = False
        database = self.database
        if database is None or database.connection is None:
            return
        if database.in_atomic_block or (database.errors_occurred and not database.is_usable()):
            with contextlib.suppress(Exception):
                database.close()
            with contextlib.suppress(AttributeError):
                del connections[DEFAULT_DB_ALIAS]  # this thread's next use gets a fresh wrapper
            self.database = None
        else:
            database.errors_occurred = False

    def interrupt(self, flight: Flight) -> bool:
        """The run of ``flight`` overran its timeout: cancel its query and raise CheckTimeout in
        its thread, if it is still this lane's run. Returns whether it was."""
        with self.lock:  # the run cannot end (nor the lane take the next) meanwhile
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
            raw.cancel_safe(timeout=0.5)
    except Exception:  # best effort
        logger.warning("could not cancel the query of a timed-out run", exc_info=True)


def _as_timeout(exc: BaseException, flight: Flight) -> BaseException:
    if isinstance(exc, CheckTimeout):
        return CheckTimeout(f"{flight.job.job_exec} ran longer than its timeout of {flight.timeout:g}s")
    return exc
