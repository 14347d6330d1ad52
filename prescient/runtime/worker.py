"""The long-running worker: ``concurrency`` child processes that each claim, run and settle due
jobs for themselves (:mod:`prescient.runtime.parcels`), and a main process that supervises them.

The main process starts and replaces children, kills a child whose run is stuck past its
timeout (charging that run and handing the rest of its claim back), renews the heartbeat and
the leases of all its children's claims, passes on commands to runs in flight (pause, kill,
sleep: ``job.should_stop()``), wakes idle children when work may be due (a NOTIFY, a slot
boundary, the next due time), runs the upkeep duties (stale claims rescued, history pruned, …)
and stops gracefully on SIGTERM or SIGINT. No job crosses a pipe. Every time that decides
anything is the database's (:mod:`prescient.clock`). Database faults make each process back off
and reconnect without losing computed results.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from types import FrameType
from typing import Any

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from prescient import slots
from prescient.clock import db_clock, db_now, skew_seconds
from prescient.conf import setting
from prescient.engine import store, sweep
from prescient.engine.decisions import Decision, TickSummary
from prescient.engine.store import CHANNEL, STOP_CHANNEL
from prescient.maintenance import run_due
from prescient.maintenance.recurring import Producer
from prescient.models import FutureJob, Worker
from prescient.models.workers import GIVEN_NAME, GIVEN_NAME_MAX, default_given_name, unique_name
from prescient.states import State

from .backoff import Backoff
from .child import drop_broken_connections
from .listener import Listener
from .pool import Pool

logger = logging.getLogger(__name__)

DB_ERRORS = (OperationalError, InterfaceError)
#: Seconds between two looks for commands to the runs in flight (pause, kill, sleep) where no
#: NOTIFY says when to look (SQLite, or the listener's connection is down).
COMMAND_LOOK_SECONDS = 0.5
#: Seconds between two writes of the worker's ``jobs_done`` while its children report runs.
JOBS_DONE_EVERY = 1.0
#: With NOTIFY, the longest between two looks all the same (a notification is never relied on alone).
COMMAND_FALLBACK_SECONDS = 5.0
#: Seconds between two reports of what the worker did meanwhile (``on_report``: prescient_worker
#: prints a line a minute at ``-v 1``).
REPORT_SECONDS = 60.0


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
        lanes: int | None = None, name: str | None = None,
        on_report: Callable[[TickSummary, float], None] | None = None, report_seconds: float = REPORT_SECONDS,
    ) -> None:
        self.concurrency = max(1, concurrency)
        #: The jobs each child runs at once (WORKER_LANES by default).
        self.lanes = max(1, int(lanes or setting("WORKER_LANES")))
        #: Called once the worker has registered (the command prints its start-up line).
        self.on_start = on_start
        #: Called every ``report_seconds`` with what was counted since the last call and the
        #: seconds it covers (the command prints its line a minute).
        self.on_report, self.report_seconds = on_report, report_seconds
        self._reported, self._reported_at = TickSummary(), 0.0
        #: Only jobs of these queues (``""``: checks; others: django.tasks queues); by priority either way.
        self.queues = None if queues is None else list(queues)
        self.once = once
        self.batch_size = int(batch_size or setting("BATCH_SIZE"))
        #: The name given (``--name``, default the host's): with the host, what labels its metrics.
        self.given_name = name or default_given_name()
        if len(self.given_name) > GIVEN_NAME_MAX or not GIVEN_NAME.fullmatch(self.given_name):
            raise ValueError(f"a worker's name is 1 to {GIVEN_NAME_MAX} letters, digits, '.', '_' or '-'; "
                             f"got {self.given_name!r}")
        #: Unique to this start of this process: its claims are marked with it.
        self.name = unique_name(self.given_name, os.getpid(), uuid.uuid4().hex[:8])
        # A child's claims are ``<token>/<child>/<claim>``: within the 64 characters of reserved_by.
        self.token = f"{sweep.WORKER_TOKEN_PREFIX}{self.name}"
        self.stopping = False
        #: A second signal came: runs in flight are cut at once and handed back uncharged.
        self.cold = False
        self.summary = TickSummary()
        self.listener = Listener() if Listener.available() else None
        self.pool: Pool | None = None
        self.record: Worker | None = None
        self.heartbeat: Heartbeat | None = None
        self._next_heartbeat = 0.0
        self._backoff = Backoff(f"worker {self.name}", 0.5, 10.0)
        #: When to wake the idle children (monotonic; inf: not until something happens).
        self._wake_at = 0.0
        #: What the worker must write for children it killed or lost (kept across database faults).
        self.unsettled: list[tuple[str, list[Decision]]] = []
        #: Runs in flight already told to stop, and when the database was last asked.
        self._told: set[tuple[str, int]] = set()
        self._looked = 0.0
        self._counted_at = 0.0

    # --- life cycle ----------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping and not self.cold:
            # The second Ctrl-C or SIGTERM: stop at once (Celery's and db_worker's cold stop).
            logger.warning("worker %s: signal %s again, stopping at once", self.name, signum)
            self.cold = True
        elif not self.stopping:
            logger.info(
                "worker %s: signal %s, stopping gracefully (runs in flight have %ss to finish; "
                "the same signal again stops at once)", self.name, signum, setting("WORKER_GRACE_SECONDS"),
            )
        self.stopping = True

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        # A signal wakes the main loop at once (it waits on pipes and sockets, not on a timer).
        self._wakeup_read, wakeup_write = socket.socketpair()
        wakeup_write.setblocking(False)
        previous_fd = signal.set_wakeup_fd(wakeup_write.fileno(), warn_on_full_buffer=False)
        memory, max_runs = setting("CHILD_MEMORY_MB"), setting("CHILD_MAX_RUNS")
        try:
            self.pool = Pool(
                self.concurrency, token=self.token, batch_size=self.batch_size, queues=self.queues,
                memory_mb=int(memory) if memory else None, max_runs=int(max_runs) if max_runs else None,
                lanes=self.lanes,
            )
            self._with_db(self._register)
            if self.record is None:  # told to stop before the database answered
                self.pool.abandon()
                return 0
            self.heartbeat = Heartbeat(self.record.pk, self.token, float(setting("WORKER_HEARTBEAT_SECONDS")))
            self.heartbeat.start()
            logger.info("worker %s started, concurrency %s, lanes %s", self.name, self.concurrency, self.lanes)
            if self.on_start is not None:
                self.on_start(self)
            self._reported_at = time.monotonic()
            while not self.stopping:
                try:
                    self._step()
                    self._backoff.reset()
                except DB_ERRORS as exc:
                    self._backoff.fault(exc)
                self.report_if_due(time.monotonic())
                if self.once and self.pool.all_idle and not self.unsettled:
                    break
            self._shut_down()
        finally:
            signal.set_wakeup_fd(previous_fd)
            self._wakeup_read.close()
            wakeup_write.close()
            if self.heartbeat is not None:
                self.heartbeat.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.listener is not None:
                self.listener.close()
        logger.info("worker %s stopped: %s", self.name, self.summary.line())
        return 0

    def report_if_due(self, clock: float) -> bool:
        """Call ``on_report`` with what was counted since its last call, when ``report_seconds``
        have passed by the monotonic ``clock``; returns whether it did."""
        if self.on_report is None or clock - self._reported_at < self.report_seconds:
            return False
        now = self.summary.copy()
        self.on_report(now.since(self._reported), clock - self._reported_at)
        self._reported, self._reported_at = now, clock
        return True

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
                self._backoff.fault(exc)

    def _register(self) -> None:
        now = db_now()
        self.record = Worker.objects.create(
            name=self.name, hostname=socket.gethostname()[:255], pid=os.getpid(),
            concurrency=self.concurrency, lanes=self.lanes, started_at=now, heartbeat_at=now,
            clock_skew_seconds=skew_seconds(),
        )

    # --- one step of the loop --------------------------------------------------------------

    def _step(self) -> None:
        """Wait for a child, a notification, a signal or the next look; then supervise."""
        assert self.pool is not None
        until_look = max(0.0, self._next_heartbeat - time.monotonic())
        wait_for = min(COMMAND_LOOK_SECONDS, until_look)
        if self.pool.has_idle():
            wait_for = min(wait_for, max(0.0, self._wake_at - time.monotonic()))
        listening = self.listener.socket() if self.listener is not None else None
        ready = self.pool.wait(wait_for, [self._wakeup_read] + ([listening] if listening is not None else []))
        if self._wakeup_read in ready:
            try:
                self._wakeup_read.recv(512)
            except OSError:
                pass
        if self.stopping:
            return
        counted = self.pool.read()
        self.summary.counts.update(counted)
        drop_broken_connections()
        if counted and time.monotonic() - self._counted_at >= JOBS_DONE_EVERY and self.record is not None:
            self._counted_at = time.monotonic()  # prescient_status (and the bench) read jobs_done
            Worker.objects.filter(pk=self.record.pk).update(jobs_done=self.summary.processed)
        self.unsettled.extend(self.pool.check(db_now))
        self._settle()
        self._pass_on_commands()
        self._look_around_if_due()
        if self.pool.has_idle() and not self.once:
            if self._wake_at == math.inf:
                self._wake_at = self._next_wake()
            if self.pool.retry_at is not None:  # jobs held back by a limit: look again then
                self._wake_at, self.pool.retry_at = min(self._wake_at, self.pool.retry_at), None
            if time.monotonic() >= self._wake_at:
                self.pool.wake()
                self._wake_at = math.inf

    def _work_may_be_due(self) -> None:
        """Something made work due: wake the idle children now."""
        self._wake_at = 0.0

    def _pass_on_commands(self) -> None:
        """Tell the children which of their runs were paused, killed or slept since they started
        (``job.should_stop()``), and wake idle children for work made due. On PostgreSQL a NOTIFY
        says when to look; elsewhere, and as a fallback, one look at this worker's claims in
        flight every :data:`COMMAND_LOOK_SECONDS`."""
        assert self.pool is not None
        notified = self.listener.drain() if self.listener is not None else None
        if notified is not None and CHANNEL in notified:
            self._work_may_be_due()
        since = time.monotonic() - self._looked
        if notified is not None and STOP_CHANNEL not in notified and since < COMMAND_FALLBACK_SECONDS:
            return
        if notified is None and since < COMMAND_LOOK_SECONDS:
            return
        if self.pool.all_idle:
            return
        self._looked = time.monotonic()
        asked = set(store.asked_to_stop(f"{self.token}/", prefix=True))
        if asked - self._told:
            self.pool.interrupt(asked - self._told)
        self._told = asked

    def _settle(self) -> None:
        """Write what the worker owes for children it killed or lost."""
        while self.unsettled:
            token, decisions = self.unsettled[0]
            now = db_now()
            store.settle(decisions, token, now, self.summary)
            self.unsettled.pop(0)

    def _look_around_if_due(self) -> None:
        """At heartbeat pace: the upkeep that is due (stale claims reclaimed or handed back, …),
        and notice work due without a wake-up."""
        if time.monotonic() < self._next_heartbeat:
            return
        survey = sweep.survey()
        assert survey.clock is not None
        now = survey.clock
        rescued: Counter[str] = Counter()  # stale claims: reclaimed, handed back, buried, …
        done = run_due(now, survey=survey, said=rescued)
        self.summary.add_rescued(rescued)
        if survey.due or done.get(Producer.name):
            self._work_may_be_due()
        if self.record is not None:
            Worker.objects.filter(pk=self.record.pk).update(
                jobs_done=self.summary.processed, last_slot_at=slots.floor(now, int(setting("SLOT_MINUTES")))
            )
        self._next_heartbeat = time.monotonic() + float(setting("WORKER_HEARTBEAT_SECONDS"))

    def _next_wake(self) -> float:
        """When idle children should look again (monotonic): the next slot boundary, the next due
        time, or (without NOTIFY) the poll interval, whichever comes first."""
        now = db_now()
        boundary = slots.next_after(now, int(setting("SLOT_MINUTES")))
        wait = (boundary - now).total_seconds()
        earliest = self._earliest_due_after(now)
        if earliest is not None:
            wait = min(wait, (earliest - now).total_seconds())  # e.g. a task's exact run_after
        if self.listener is None or self.listener.socket() is None:
            wait = min(wait, float(setting("WORKER_POLL_SECONDS")))
        return time.monotonic() + max(0.0, wait)

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
        grace = float(setting("WORKER_GRACE_SECONDS"))
        now = self._with_db(db_now, give_up_after=10) or timezone.now()
        self.unsettled.extend(self.pool.stop(
            grace, now, self.summary.counts.update, cold=lambda: self.cold, also=[self._wakeup_read]
        ))
        self._with_db(self._settle, give_up_after=60)
        if self.record is not None:
            record = self.record
            self._with_db(
                lambda: Worker.objects.filter(pk=record.pk).update(
                    stopped_at=db_clock(), heartbeat_at=db_clock(), jobs_done=self.summary.processed
                ),
                give_up_after=10,
            )
