"""The long-running worker: sweeps at every slot boundary (or when woken), many at once.

One worker process claims due jobs (``FOR UPDATE SKIP LOCKED``), never more than it has idle
children for (plus ``WORKER_PREFETCH``), hands them to ``concurrency`` child processes
(:mod:`prescient.runtime.pool`), each of which starts the run, loads its entity and calls the
check; it settles results in batches, heart-beats and renews the leases of its claims, and
reclaims the claims of workers that stopped heart-beating. Every time that decides anything
is the database's (:mod:`prescient.clock`). SIGTERM or SIGINT stop it gracefully; database faults make it back off and
reconnect without losing computed results.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime
from types import FrameType
from typing import Any

from django.db import InterfaceError, OperationalError, connection, connections

from prescient import slots
from prescient.clock import db_clock, db_now, skew_seconds
from prescient.conf import setting
from prescient.engine import store, sweep
from prescient.engine.decisions import BURIED, Decision, TickSummary
from prescient.engine.store import CHANNEL, STOP_CHANNEL
from prescient.maintenance import run_due
from prescient.maintenance.rescuer import Rescuer
from prescient.models import FutureJob, Worker
from prescient.states import State

from .child import drop_broken_connections
from .listener import Listener
from .pool import Pool

logger = logging.getLogger(__name__)

DB_ERRORS = (OperationalError, InterfaceError)
#: Seconds between two looks for commands to the runs in flight (pause, kill, sleep) where no
#: NOTIFY says when to look (SQLite, or the listener's connection is down).
COMMAND_LOOK_SECONDS = 0.5
#: With NOTIFY, the longest between two looks all the same (a notification is never relied on alone).
COMMAND_FALLBACK_SECONDS = 5.0


class Heartbeat(threading.Thread):
    """Renews the worker's heartbeat and the leases of its claims, on a connection of its own,
    so that a busy or stalled main loop never lets an alive worker's claims go stale."""

    def __init__(self, worker_pk: int, token: str, interval: float) -> None:
        super().__init__(name="prescient-heartbeat", daemon=True)
        self.worker_pk, self.token, self.interval = worker_pk, token, interval
        self.stopped = threading.Event()

    def beat(self) -> None:
        skew = skew_seconds()
        Worker.objects.filter(pk=self.worker_pk).update(heartbeat_at=db_clock(), clock_skew_seconds=skew)
        store.renew_leases(f"{self.token}/", prefix=True)

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.beat()
            except DB_ERRORS as exc:
                logger.warning("heartbeat failed (%s); retrying", exc)
                connection.close()
        connection.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)


class WorkerProcess:
    """One ``prescient_worker``. ``run()`` returns the exit status."""

    def __init__(
        self, *, concurrency: int = 1, once: bool = False, batch_size: int | None = None,
        queues: list[str] | None = None, on_start: Callable[[WorkerProcess], None] | None = None,
    ) -> None:
        self.concurrency = max(1, concurrency)
        #: Called once the worker has registered (the command prints its start-up line).
        self.on_start = on_start
        #: Only jobs of these queues (``""``: checks; others: django.tasks queues), by priority.
        self.queues = None if queues is None else list(queues)
        self.once = once
        self.batch_size = int(batch_size or setting("BATCH_SIZE"))
        self.name = f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.token = f"{sweep.WORKER_TOKEN_PREFIX}{self.name}"[:56]
        self.stopping = False
        self.summary = TickSummary()
        self.prefetch = max(0, int(setting("WORKER_PREFETCH")))
        #: Claimed jobs not yet handed to a child: (job, the claim's now, started by the claim).
        self.backlog: deque[tuple[FutureJob, datetime, bool]] = deque()
        self.pacer = sweep.Pacer()
        self.unsettled: list[Decision] = []
        self.listener = Listener() if Listener.available() else None
        self.pool: Pool | None = None
        self.record: Worker | None = None
        self.heartbeat: Heartbeat | None = None
        self._next_heartbeat = 0.0
        self._backoff = 0.0
        self._drained = False
        self._batches = 0
        self._last_settle = time.monotonic()
        #: Runs in flight already told to stop, and when the database was last asked.
        self._told: set[tuple[str, int]] = set()
        self._looked = 0.0

    # --- life cycle ----------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            logger.info("worker %s: signal %s, stopping gracefully", self.name, signum)
        self.stopping = True

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        memory, max_runs = setting("CHILD_MEMORY_MB"), setting("CHILD_MAX_RUNS")
        self.pool = Pool(
            self.concurrency, memory_mb=int(memory) if memory else None, max_runs=int(max_runs) if max_runs else None
        )
        try:
            self._with_db(self._register)
            if self.record is None:  # told to stop before the database answered
                self.pool.close()
                return 0
            self.heartbeat = Heartbeat(self.record.pk, self.token, float(setting("WORKER_HEARTBEAT_SECONDS")))
            self.heartbeat.start()
            logger.info("worker %s started, concurrency %s", self.name, self.concurrency)
            if self.on_start is not None:
                self.on_start(self)
            while not self.stopping:
                try:
                    self._step()
                    self._backoff = 0.0
                except DB_ERRORS as exc:
                    self._db_fault(exc)
                if self.once and self._drained and not self.pool.busy and not self.backlog:
                    break
            self._shut_down()
        finally:
            if self.heartbeat is not None:
                self.heartbeat.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.listener is not None:
                self.listener.close()
        logger.info("worker %s stopped: %s", self.name, self.summary.line())
        return 0

    def _with_db(self, func: Any, *args: Any, give_up_after: float | None = None) -> Any:
        """Call ``func`` until the database answers.

        Without ``give_up_after`` it gives up as soon as the worker is told to stop; with it,
        after that many seconds (what is left unwritten is then reclaimed by the stale rule).
        """
        deadline = None if give_up_after is None else time.monotonic() + give_up_after
        while True:
            try:
                return func(*args)
            except DB_ERRORS as exc:
                out_of_time = (deadline is None and self.stopping) or (
                    deadline is not None and time.monotonic() > deadline
                )
                if out_of_time:
                    logger.error("worker %s: giving up on the database (%s)", self.name, exc)
                    return None
                self._db_fault(exc)

    def _db_fault(self, exc: Exception) -> None:
        self._backoff = min(max(self._backoff * 2, 0.5), 10.0)
        logger.warning("worker %s: database error (%s); retrying in %.1fs", self.name, exc, self._backoff)
        for conn in connections.all():
            try:
                conn.close()
            except Exception:
                pass
        time.sleep(self._backoff)

    def _register(self) -> None:
        now = db_now()
        self.record = Worker.objects.create(
            name=self.name, hostname=socket.gethostname()[:255], pid=os.getpid(),
            concurrency=self.concurrency, started_at=now, heartbeat_at=now, clock_skew_seconds=skew_seconds(),
        )

    # --- one step of the loop --------------------------------------------------------------

    def _step(self) -> None:
        drop_broken_connections()
        self._look_around_if_due()
        assert self.pool is not None
        self._feed()
        if self.pool.busy:
            self._pass_on_commands()
            decisions = self.pool.collect(timeout=COMMAND_LOOK_SECONDS)
            for decision in decisions:
                self.pacer.record(decision)
            self.unsettled.extend(decisions)
            self._feed()  # refill the children before writing anything: they run while it is written
        idle = not self.pool.busy and not self.backlog
        if self.unsettled and (
            len(self.unsettled) >= self.batch_size or idle or time.monotonic() - self._last_settle > 1.0
        ):
            self._settle()
        if idle and self._drained and not self.once:
            self._sleep()

    def _feed(self) -> None:
        """Claim for the idle children (a parcel each, plus the prefetch) and hand them out."""
        assert self.pool is not None
        idle = len(self.pool.idle)
        room = idle * self.pacer.size(self.batch_size) + self.prefetch - len(self.backlog)
        if idle and room > 0 and (not self.backlog or self.prefetch) and not self.stopping:
            self._claim(room)
        self._dispatch()

    def _claim(self, room: int) -> None:
        """Claim up to ``room`` due jobs: no more than the idle children can start now, a
        parcel each (plus the prefetch). Without a prefetch the claim starts their runs too
        (they go straight to the children); prefetched jobs start when a child takes them.
        Their entities are loaded by the children, just before the runs."""
        now = db_now()
        # A token per batch: the claim returns exactly the rows it took, never a row of an
        # earlier batch still running. All share the worker's prefix, for lease renewal.
        self._batches += 1
        start = not self.prefetch
        jobs = store.claim(
            now, min(room, self.batch_size), f"{self.token}/{self._batches}", queues=self.queues, start=start
        )
        if not jobs:
            if not self._drained:
                self._drained = True
                self._mark_slot(now)
            return
        self._drained = False
        for job in jobs:
            self.backlog.append((job, now, start))

    def _dispatch(self) -> None:
        """Hand each idle child a parcel: jobs of one claim, as many as the pacer says, the
        backlog shared evenly between the idle children."""
        assert self.pool is not None
        idle = self.pool.idle
        for n, child in enumerate(idle):
            if not self.backlog or self.stopping:
                return
            share = -(-len(self.backlog) // (len(idle) - n))  # rounded up
            size = min(self.pacer.size(self.batch_size), share)
            room = self.pool.room(child)
            if room is not None:
                size = min(size, room)
            first, now, started = self.backlog.popleft()
            parcel = [first]
            while (
                self.backlog and len(parcel) < size and self.backlog[0][0].reserved_by == first.reserved_by
                and self.backlog[0][2] == started
            ):
                parcel.append(self.backlog.popleft()[0])
            self.pool.submit(child, parcel, now, started=started)

    def _pass_on_commands(self) -> None:
        """Tell the children which of their runs were paused, killed or slept since their claim
        (``job.should_stop()``). On PostgreSQL a NOTIFY says when to look; elsewhere, and as a
        fallback, one look at this worker's claims in flight every :data:`COMMAND_LOOK_SECONDS`."""
        assert self.pool is not None
        notified = self.listener.drain() if self.listener is not None else None
        if notified is not None and CHANNEL in notified:
            self._drained = False  # work was made due meanwhile
        since = time.monotonic() - self._looked
        if notified is not None and STOP_CHANNEL not in notified and since < COMMAND_FALLBACK_SECONDS:
            return
        if notified is None and since < COMMAND_LOOK_SECONDS:
            return
        self._looked = time.monotonic()
        asked = set(store.asked_to_stop(f"{self.token}/", prefix=True))
        if asked - self._told:
            self.pool.interrupt(asked - self._told)
        self._told = asked

    def _settle(self) -> None:
        self._last_settle = time.monotonic()
        if not self.unsettled:
            return
        by_token: dict[str, list[Decision]] = {}
        for decision in self.unsettled:
            by_token.setdefault(decision.job.reserved_by, []).append(decision)
        now = db_now()
        for token, decisions in by_token.items():
            store.settle(decisions, token, now, self.summary)
            # Forget only what was written: a database fault keeps the rest for the retry.
            self.unsettled = [d for d in self.unsettled if d.job.reserved_by != token]
        if self.record is not None:
            Worker.objects.filter(pk=self.record.pk).update(jobs_done=self.summary.processed)

    def _look_around_if_due(self) -> None:
        """At heartbeat pace: the upkeep that is due (stale claims reclaimed or buried, …), and
        notice work due without a wake-up."""
        if time.monotonic() < self._next_heartbeat:
            return
        survey = sweep.survey()
        assert survey.clock is not None
        now = survey.clock
        done = run_due(now, survey=survey)
        self.summary.counts[BURIED] += done.get(Rescuer.name, 0)
        if survey.due:
            self._drained = False
        self._next_heartbeat = time.monotonic() + float(setting("WORKER_HEARTBEAT_SECONDS"))

    def _mark_slot(self, now: datetime) -> None:
        if self.record is not None:
            Worker.objects.filter(pk=self.record.pk).update(
                last_slot_at=slots.floor(now, int(setting("SLOT_MINUTES")))
            )

    def _sleep(self) -> None:
        """Idle: wait for the next slot boundary, a heartbeat, or a wake-up."""
        now = db_now()
        boundary = slots.next_after(now, int(setting("SLOT_MINUTES")))
        until_boundary = (boundary - now).total_seconds()
        until_heartbeat = max(0.0, self._next_heartbeat - time.monotonic())
        wait = min(until_boundary, until_heartbeat)
        earliest = self._earliest_due_after(now)
        if earliest is not None:
            wait = min(wait, (earliest - now).total_seconds())  # e.g. a task's exact run_after
        if self.listener is not None:
            woken = self.listener.wait(wait)
        else:
            time.sleep(min(wait, float(setting("WORKER_POLL_SECONDS"))))
            woken = True  # SQLite: look again at every poll
        now = db_now()
        if woken or time.monotonic() >= self._next_heartbeat or now >= boundary or (earliest and now >= earliest):
            self._drained = False

    def _earliest_due_after(self, now: datetime) -> datetime | None:
        """The next due time after ``now`` among this worker's jobs (one look at the due index)."""
        pending = FutureJob.objects.filter(state=State.SCHEDULED, next_check_at__gt=now)
        if self.queues is not None:
            pending = pending.filter(queue__in=self.queues)
        return pending.order_by("next_check_at").values_list("next_check_at", flat=True).first()

    # --- stopping ------------------------------------------------------------------------

    def _shut_down(self) -> None:
        """Finish what runs within the grace period, hand back every other claim, unregister."""
        assert self.pool is not None
        grace_until = time.monotonic() + float(setting("WORKER_GRACE_SECONDS"))
        unstarted = [job for job, _, _ in self.backlog]
        self.backlog.clear()
        # Ask the runs in flight to stop (job.should_stop()): a cooperative check returns
        # RELEASE at once and its claim is handed back, so the worker need not wait out the grace.
        self.pool.interrupt_all()
        while self.pool.busy and time.monotonic() < grace_until:
            self.unsettled.extend(self.pool.collect(timeout=min(0.5, grace_until - time.monotonic())))

        abandoned = self.pool.abandon() if self.pool.busy else []
        self.pool.close()
        for job in [*unstarted, *abandoned]:
            self.unsettled.append(sweep.hand_back(job))
        if abandoned:
            logger.warning(
                "worker %s: %s run(s) did not finish within the grace period; handed back", self.name, len(abandoned)
            )
        self._with_db(self._settle, give_up_after=60)
        if self.record is not None:
            record = self.record
            self._with_db(
                lambda: Worker.objects.filter(pk=record.pk).update(stopped_at=db_clock(), heartbeat_at=db_clock()),
                give_up_after=10,
            )
