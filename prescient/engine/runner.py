"""Running one check with a real timeout, in the calling process.

The tick runs checks in its main thread and stops a check that overruns with ``SIGALRM``: the
alarm raises :class:`~prescient.exceptions.CheckTimeout` inside the check, which interrupts
``time.sleep`` and pure-Python loops alike. Outside the main thread (or where ``SIGALRM`` does
not exist) the run cannot be interrupted; it is measured and counted as failed once it returns.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from django.db import connection

from prescient.cleaning import clean_text
from prescient.conf import setting
from prescient.exceptions import CheckTimeout

from . import store
from .decisions import CHECK_TIMEOUT, type_path

logger = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What one call of a check gave: its value, or the error that ended it."""

    value: Any = None
    error: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    #: For a run that raised: the dotted path of the exception's class and its traceback.
    exception_path: str = ""
    traceback: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.error)


def _can_alarm() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    store.cancel_current_query()
    raise CheckTimeout()


def describe(exc: BaseException) -> str:
    """``TypeName: message`` of an exception, for the job's error fields."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def call(func: Callable[..., Any], args: tuple[Any, ...], timeout: float, label: str) -> RunResult:
    """Call ``func(*args)``, stopped after ``timeout`` seconds.

    The check runs in autocommit mode, like a view without ATOMIC_REQUESTS: it is not wrapped
    in a transaction, so a slow check holds no transaction (and, on SQLite, no write lock)
    open. A check that needs all-or-nothing writes uses ``transaction.atomic()`` itself. The
    traceback of a check that raises goes to the log, cut as the database cuts the error it
    keeps (:func:`prescient.cleaning.clean_text`: 8 KB, the first and last parts): a check
    raising a 5 MB message writes 8 KB of log per run, not 5 MB. ``KeyboardInterrupt`` and
    ``SystemExit`` are not caught.
    """
    alarm = _can_alarm()
    previous: Any = None
    if alarm:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    started = time.monotonic()
    result = RunResult()
    try:
        try:
            result.value = func(*args)
        finally:
            if alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except CheckTimeout:
        result.timed_out = True
    except Exception as exc:  # a check may raise anything; it is a failed run, not a crash
        result.traceback = "".join(traceback.format_exception(exc))
        # Formatted here, not with exc_info: a handler would print the whole message again.
        logger.error("check %s raised\n%s", label, clean_text(result.traceback.rstrip()))
        result.error = describe(exc)
        if isinstance(exc, MemoryError):
            limit = setting("CHILD_MEMORY_MB")
            result.error = f"MemoryError: {label} ran out of memory" + (
                f" (its process may use {limit} MB: CHILD_MEMORY_MB)" if limit else ""
            )
        result.exception_path = type_path(exc)
    finally:
        if alarm:
            signal.signal(signal.SIGALRM, previous)
        result.seconds = time.monotonic() - started
    if not result.timed_out and result.seconds > timeout:
        result.timed_out = True  # could not be interrupted (not the main thread): still a failure
    if result.timed_out:
        result.value = None
        result.error = f"CheckTimeout: {label} ran longer than its timeout of {timeout:g}s"
        result.exception_path, result.traceback = CHECK_TIMEOUT, ""
        logger.warning("check %s stopped after %.1fs (timeout %gs)", label, result.seconds, timeout)
        if not connection.is_usable():
            # The alarm may have landed inside a query: start afresh rather than reuse a
            # connection in an unknown state.
            connection.close()
    return result
