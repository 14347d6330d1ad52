"""Running a job's own code with a real timeout, in the calling process: the one place where a
run ends, whatever the code did.

The tick runs checks in its main thread and stops a check that overruns with ``SIGALRM``: the
alarm raises :class:`~prescient.exceptions.CheckTimeout` inside the check, which interrupts
``time.sleep`` and pure-Python loops alike. Outside the main thread (or where ``SIGALRM`` does
not exist) the run cannot be interrupted; it is measured and counted as failed once it returns.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.db import connection

from prescient import interrupts, slots
from prescient.cleaning import clean_text
from prescient.conf import setting
from prescient.exceptions import CheckTimeout, Interrupted, Release
from prescient.states import Event

from . import store
from .decisions import CHECK_TIMEOUT, Decision, describe, type_path

if TYPE_CHECKING:
    from prescient.models import FutureJob

logger = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What one call of a job's code gave: its value, or what ended it.

    Exactly one of these holds: it returned (``value``), it raised (``error``, with the
    exception itself, its class's dotted path and its traceback), it ran past its timeout
    (``timed_out``, ``error`` too), it raised :class:`~prescient.exceptions.Release`
    (``released``), or an operator's signal stopped it (``interrupted``: not the job's fault).
    """

    value: Any = None
    error: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    #: For a run that raised: the dotted path of the exception's class and its traceback.
    exception_path: str = ""
    traceback: str = ""
    #: The exception itself (a run that raised, or a CheckTimeout), for the error handler.
    exception: BaseException | None = None
    #: It raised prescient.Release: its claim is handed back uncharged.
    released: bool = False
    #: An operator's Ctrl-C or SIGTERM stopped it: handed back uncharged.
    interrupted: bool = False

    @property
    def failed(self) -> bool:
        return bool(self.error)


def handed_back(job: FutureJob, result: RunResult, now: datetime) -> Decision | None:
    """The decision for a run that came to nothing the job is charged for, or None: one that
    raised :class:`~prescient.exceptions.Release` (due again at the next slot, as
    :data:`prescient.RELEASE`), or that an operator's signal stopped (due as it was)."""
    if result.interrupted:
        return Decision(job=job, event=Event.HAND_BACK, seconds=result.seconds)
    if result.released:
        return released(job, now, result.seconds)
    return None


def released(job: FutureJob, now: datetime, seconds: float = 0.0) -> Decision:
    """The claim handed back by the job's own code: nothing counted, due at the next slot."""
    next_slot = slots.next_after(now, int(setting("SLOT_MINUTES")))
    return Decision(job=job, event=Event.HAND_BACK, next_check_at=next_slot, seconds=seconds)


def _can_alarm() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


#: The event loop of this process's lanes (a worker's child), where async code is awaited;
#: without one (a tick) each awaitable runs on a loop of its own.
_loop: list[asyncio.AbstractEventLoop] = []


def use_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    """Await async code on ``loop`` (running in a thread of its own) from now on (None: on a
    loop of its own each time)."""
    _loop[:] = [] if loop is None else [loop]


#: The monotonic deadline of the run in progress in this thread (for :func:`resolve`).
_deadline = threading.local()


def resolve(value: Any) -> Any:
    """``value``, awaited if it is awaitable (an ``async def`` handler called by a job's code),
    within what is left of the run's timeout."""
    if not inspect.isawaitable(value):
        return value
    left = getattr(_deadline, "at", time.monotonic() + 60.0) - time.monotonic()
    return wait_for(value, left)


def wait_for(awaitable: Any, timeout: float) -> Any:
    """Await ``awaitable`` for at most ``timeout`` seconds (CheckTimeout past it), on this
    process's loop when it has one, else on a loop of its own; returns its value."""

    async def bounded() -> Any:
        try:
            return await asyncio.wait_for(awaitable, max(timeout, 0.0))
        except TimeoutError as exc:
            if isinstance(exc.__cause__, asyncio.CancelledError):  # wait_for's own, not the code's
                raise CheckTimeout(f"awaited past its timeout of {timeout:g}s") from None
            raise  # the code's own TimeoutError

    if _loop and not _in_loop(_loop[0]):
        return asyncio.run_coroutine_threadsafe(bounded(), _loop[0]).result()
    return asyncio.run(bounded())


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    store.cancel_current_query()
    raise CheckTimeout()


def call(func: Callable[..., Any], args: tuple[Any, ...], timeout: float, label: str, what: str = "check") -> RunResult:
    """Call ``func(*args)``, stopped after ``timeout`` seconds: the one place where a run of a
    job's own code ends, whatever it did. ``label`` names the run in the log and the error,
    after ``what`` the code is (its kind: ``check``, ``expectation``, ``task``).

    The check runs in autocommit mode, like a view without ATOMIC_REQUESTS: it is not wrapped
    in a transaction, so a slow check holds no transaction (and, on SQLite, no write lock)
    open. A check that needs all-or-nothing writes uses ``transaction.atomic()`` itself.

    Anything the code raises is a failed run of its job, ``SystemExit`` and
    ``KeyboardInterrupt`` included (a job's code cannot stop the process that runs it); only
    :class:`~prescient.exceptions.Release` (handed back uncharged) and an operator's signal
    (:class:`~prescient.exceptions.Interrupted`, handed back uncharged) are not. The traceback
    of a run that raised goes to the log, cut as the database cuts the error it keeps
    (:func:`prescient.cleaning.clean_text`: 8 KB, the first and last parts): a check raising a
    5 MB message writes 8 KB of log per run, not 5 MB.
    """
    alarm = _can_alarm()
    previous: Any = None
    result = RunResult()
    started = time.monotonic()
    try:
        try:
            if alarm:
                previous = signal.signal(signal.SIGALRM, _on_alarm)
                signal.setitimer(signal.ITIMER_REAL, timeout)
            # An operator's signal while the code runs (prescient_tick, or prescient.tick() in a
            # shell: see runtime.tick.operator_signals) raises Interrupted here, and only here.
            _deadline.at = started + timeout
            with interrupts.interruptible():
                result.value = func(*args)
                if inspect.isawaitable(result.value):  # an async def check, task or handler
                    result.value = wait_for(result.value, timeout - (time.monotonic() - started))
        finally:
            if alarm:
                try:  # disarmed first: an alarm that fires now cannot skip the handler's restore
                    signal.setitimer(signal.ITIMER_REAL, 0)
                finally:
                    signal.signal(signal.SIGALRM, previous)
    except CheckTimeout as exc:
        result.timed_out, result.exception = True, exc
    except Interrupted:
        result.interrupted = True
        logger.warning("%s: stopped by signal %s; its claim is handed back", label, interrupts.operator_signal())
    except Release as exc:
        result.released = True
        logger.info("%s released its claim%s", label, f": {exc.reason}" if exc.reason else "")
    except BaseException as exc:  # a job's code may raise anything: a failed run, never a crash
        if isinstance(exc, KeyboardInterrupt) and interrupts.operator_signal():
            result.interrupted = True  # the operator's second Ctrl-C, through Python's own handler
        else:
            _raised(result, exc, label, what)
    result.seconds = time.monotonic() - started
    if not result.timed_out and not result.interrupted and result.seconds > timeout:
        result.timed_out = True  # could not be interrupted (not the main thread): still a failure
    if result.timed_out:
        result.value, result.released = None, False
        result.error = f"CheckTimeout: {label} ran longer than its timeout of {timeout:g}s"
        result.exception_path, result.traceback = CHECK_TIMEOUT, ""
        if not isinstance(result.exception, CheckTimeout):
            result.exception = CheckTimeout(result.error)
        logger.warning("%s %s stopped after %.1fs (timeout %gs)", what, label, result.seconds, timeout)
    if (result.timed_out or result.interrupted) and not connection.is_usable():
        # The alarm or signal may have landed inside a query: start afresh rather than reuse a
        # connection in an unknown state.
        connection.close()
    return result


def _raised(result: RunResult, exc: BaseException, label: str, what: str = "check") -> None:
    """Make ``result`` a failed run that raised ``exc``."""
    result.exception = exc
    result.traceback = "".join(traceback.format_exception(exc))
    # Formatted here, not with exc_info: a handler would print the whole message again.
    logger.error("%s %s raised\n%s", what, label, clean_text(result.traceback.rstrip()))
    result.error = describe(exc)
    if isinstance(exc, MemoryError):
        limit = setting("CHILD_MEMORY_MB")
        result.error = f"MemoryError: {label} ran out of memory" + (
            f" (its process may use {limit} MB: CHILD_MEMORY_MB)" if limit else ""
        )
    elif isinstance(exc, (SystemExit, KeyboardInterrupt)):
        # Not allowed to stop the process that runs it: said so, as well as what it raised.
        result.error += f" (raised by {label}: a failed run; the process goes on)"
    result.exception_path = type_path(exc)
