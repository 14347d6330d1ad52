"""The tick: one pass over what is due, in this process, then return (cron, tests, replays).

Upkeep that is due runs first (stale claims are reclaimed, handed back or buried); then batch
after batch is swept until nothing due is left. Jobs re-scheduled or retried during the tick
are due after ``now`` and so are not run twice by it.

While a batch runs, a guard thread renews its leases (so a healthy run never looks stale,
whatever its timeout), tells the runs of the batch that were paused, killed or slept to stop
(``job.should_stop()``, by a cheap look at the batch's claims every quarter second) and watches
the run in progress: a check that will not stop at its
timeout (it ignores ``SIGALRM``, or is stuck in C code) makes the guard write what the batch has
so far, fail that run, hand back the runs not started, and, with ``watchdog``, end the process
with status 3. A tick never blocks forever.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from types import FrameType

from django.db import connection

from prescient import interrupts, slots
from prescient.conf import setting, stale_after_seconds
from prescient.engine import store, sweep
from prescient.engine.decisions import Decision, TickSummary
from prescient.exceptions import CheckTimeout, Interrupted
from prescient.maintenance import run_due
from prescient.maintenance.recurring import Producer
from prescient.models import FutureJob

from .pool import HARD_KILL_AFTER

logger = logging.getLogger(__name__)

#: The exit status of a tick ended by its watchdog.
WATCHDOG_EXIT = 3
#: Seconds between two looks of the guard at the batch in progress (leases, overruns, commands).
LOOK_EVERY = 0.25


class Guard(threading.Thread):
    """Renews the leases of the batch in progress and ends a run that overruns its timeout."""

    def __init__(self, now: datetime, *, watchdog: bool) -> None:
        super().__init__(name="prescient-tick-guard", daemon=True)
        self.now, self.watchdog = now, watchdog
        self.every = max(0.5, stale_after_seconds() / 4)
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.token = ""
        self.job: FutureJob | None = None
        self.decisions: list[Decision] = []
        self.started = self.renewed = time.monotonic()
        self.overran = False

    def watch(self, token: str, job: FutureJob | None, decisions: list[Decision]) -> None:
        with self.lock:
            self.token, self.job, self.decisions = token, job, decisions
            self.started = time.monotonic()

    def run(self) -> None:
        try:
            while not self.stopped.wait(min(self.every, LOOK_EVERY)):
                with self.lock:
                    token, job, since = self.token, self.job, self.started
                if job is None:
                    continue
                if time.monotonic() - since > sweep.timeout_of(job) + HARD_KILL_AFTER:
                    self._overrun(token, job, time.monotonic() - since)
                    return
                # Commands that reach the run: a pause, kill or sleep of a job of the batch
                # makes its job.should_stop() true (and keeps it from starting).
                stopped = store.asked_to_stop(token)
                if stopped:
                    interrupts.ask(token, [pk for _, pk in stopped])
                if time.monotonic() - self.renewed >= self.every:
                    self.renewed = time.monotonic()
                    store.renew_leases(token)
        except Exception:  # the guard must never take the tick down; the stale rule is the backstop
            logger.exception("the tick's lease guard failed")
        finally:
            connection.close()

    def _overrun(self, token: str, job: FutureJob, seconds: float) -> None:
        """The run of ``job`` did not stop at its timeout: write the batch's results, fail that
        run, hand back what has not started; then end the process (with ``watchdog``)."""
        self.overran = True
        error = CheckTimeout(
            f"{job.job_exec} did not stop at its timeout of {sweep.timeout_of(job):g}s "
            "(it ignored the alarm); the tick was ended"
        )
        logger.error("job id=%s CheckTimeout: %s", job.pk, error)
        # The tick runs one check at a time: every other job of the batch without a decision
        # has not run (some may have been started with their group), so it is handed back.
        done = {decision.job.pk for decision in self.decisions}
        unstarted = FutureJob.objects.filter(reserved_by=token).exclude(pk__in=done)
        decisions = [
            *self.decisions, sweep.failed_run(job, error, self.now, seconds),
            *(sweep.hand_back(other) for other in unstarted if other.pk != job.pk),
        ]
        store.settle(decisions, token, self.now, TickSummary())
        if self.watchdog:
            logger.error("prescient tick: ended by its watchdog (exit status %s)", WATCHDOG_EXIT)
            os._exit(WATCHDOG_EXIT)

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)


@contextmanager
def operator_signals(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """While the ``with`` block runs (a tick), an operator's Ctrl-C or SIGTERM stops the tick
    cleanly: the run in progress is handed back uncharged (it raises
    :class:`~prescient.exceptions.Interrupted` inside that run, and only there: a signal outside
    the job's own code stops the tick after the step in progress), nothing more starts, and what
    the batch has is written; the summary's ``stopped_by`` names the signal. A second signal
    does what it did before (Python's KeyboardInterrupt in a shell; otherwise the process ends
    at once, its claim left to the stale-claim rule). Call it in the main thread."""
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if interrupts.operator_signal():
            before = previous[signum]
            if callable(before):
                before(signum, frame)  # Python's own: KeyboardInterrupt
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        logger.warning("prescient tick: signal %s; handing back what has not run and stopping", signum)
        if interrupts.stop_by_operator(signum):
            raise Interrupted(signum)

    for sig in signals:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        interrupts.reset()


def _sigint_is_pythons() -> bool:
    """Whether Ctrl-C would raise KeyboardInterrupt here (a shell, a host's process), where
    :func:`tick` takes it for the length of the pass."""
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


def tick(now: datetime | None = None, *, batch_size: int | None = None, watchdog: bool = False) -> TickSummary:
    """Process every job due at ``now`` (default: the database's time), batch by batch, then return.

    ``watchdog``: end the process (status 3) when a check will not stop at its timeout, after
    writing what can be written (``prescient_tick`` sets it; a host calling ``tick()`` in its own
    process decides). Without it such a run is failed and its batch-mates handed back, and the
    tick waits for the check to return.
    """
    if now is not None:
        slots.require_aware(now, "now")
    if not _sigint_is_pythons():
        return _tick(now, batch_size, watchdog)
    # A Ctrl-C in a shell or a host's process: what ran is written and what had not run is
    # handed back uncharged (it is the operator's, not a job's failure); then the caller is
    # interrupted, as it expects.
    with operator_signals((signal.SIGINT,)):
        summary = _tick(now, batch_size, watchdog)
    if summary.stopped_by:
        raise KeyboardInterrupt
    return summary


def _tick(now: datetime | None, batch_size: int | None, watchdog: bool) -> TickSummary:
    survey = sweep.survey(now)  # one query: what is due, what is stale, the database's time
    assert survey.clock is not None
    now = survey.clock if now is None else now
    size = int(batch_size or setting("BATCH_SIZE"))
    summary = TickSummary()
    rescued: Counter[str] = Counter()  # stale claims: reclaimed, handed back, buried, …
    done = run_due(now, survey=survey, said=rescued)
    summary.add_rescued(rescued)
    if not survey.due and not done.get(Producer.name):  # occurrences just produced are due
        summary.stopped_by = interrupts.operator_signal()
        return summary
    guard = Guard(now, watchdog=watchdog)
    guard.start()
    decisions: list[Decision] = []
    pacer = sweep.Pacer()
    ran: set[int] = set()  # each job runs once per tick, however soon its error handler retries it

    def watch(token: str, job: FutureJob | None) -> None:
        guard.watch(token, job, decisions)

    try:
        while not guard.overran and not interrupts.stopping_all() and sweep.sweep_batch(
            now, size, summary, watch=watch, decisions=decisions, pacer=pacer, ran=ran
        ):
            decisions = []
    finally:
        guard.stop()
    summary.stopped_by = interrupts.operator_signal()
    return summary
