"""Which runs in this process are asked to stop: what ``job.should_stop()`` reads.

A run learns that a person paused, killed or slept its job, or that its worker is stopping, by
looking here: a set in memory, so a check may ask in a tight loop. Whoever watches the runs of
the process fills it in: the tick's guard thread (:mod:`prescient.runtime.tick`), or, in a
worker's child process, a thread reading the commands its worker sends
(:mod:`prescient.runtime.child`). A request names the claim (its reservation token) as well as
the job, so a request that arrives late can never stop a later claim of the same job.

Nothing here reads the database or the clock; it imports nothing of prescient.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_asked: set[tuple[str, int]] = set()
#: Set when every run of the process is asked to stop.
_everything = threading.Event()


class _Operator:
    #: The signal with which an operator stopped this process (0: none).
    signum = 0
    #: Whether the main thread is inside a job's own code (see :func:`interruptible`).
    in_run = False


_operator = _Operator()


def ask(token: str, pks: Iterable[int]) -> None:
    """Ask the runs of the jobs ``pks`` , claimed under ``token``, to stop."""
    with _lock:
        _asked.update((token, int(pk)) for pk in pks)


def ask_all() -> None:
    """Ask every run of this process to stop (its worker is stopping)."""
    _everything.set()


def asked(token: str, pk: int | None) -> bool:
    """Whether the run of job ``pk`` claimed under ``token`` is asked to stop."""
    if _everything.is_set():
        return True
    if not token or pk is None:
        return False
    return (token, pk) in _asked


def stopping_all() -> bool:
    """Whether every run of this process is asked to stop."""
    return _everything.is_set()


def forget(token: str) -> None:
    """Drop the requests about the claim ``token`` (its runs are over)."""
    with _lock:
        for entry in [entry for entry in _asked if entry[0] == token]:
            _asked.discard(entry)


def stop_by_operator(signum: int) -> bool:
    """An operator's signal (Ctrl-C, SIGTERM) stops this process: every run is asked to stop.
    Returns whether the main thread is inside a job's own code at this instant (a signal
    handler then raises :class:`~prescient.exceptions.Interrupted` there, to hand that run back)."""
    _operator.signum = _operator.signum or signum
    _everything.set()
    return _operator.in_run


def operator_signal() -> int:
    """The signal with which an operator stopped this process, or 0."""
    return _operator.signum


@contextmanager
def interruptible() -> Iterator[None]:
    """Mark the main thread as inside a job's own code for the ``with`` block (other threads
    are never interrupted by a signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _operator.in_run = True
    try:
        yield
    finally:
        _operator.in_run = False


def reset() -> None:
    """Forget every request (a fresh process, or a test)."""
    with _lock:
        _asked.clear()
    _everything.clear()
    _operator.signum = 0
