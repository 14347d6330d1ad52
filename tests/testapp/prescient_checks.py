"""Checks used by tests that run in other processes (which discover them like any host app)."""

import os
import time
from datetime import timedelta
from typing import Any

import prescient

from .handlers import retry_now
from .models import RunLog, Thing


def _log(name: str, thing: Thing) -> RunLog:
    import os

    return RunLog.objects.create(check_name=name, entity_key=str(thing.pk), pid=os.getpid(), started=time.time())


@prescient.check("test.record", model="testapp.Thing")
def record(thing: Thing, job: object) -> timedelta | None:
    """Logs the call; re-checks in an hour when the thing's status is ``again``."""
    _log("test.record", thing)
    return timedelta(hours=1) if thing.status == "again" else None


@prescient.check("test.slow", model="testapp.Thing")
def slow(thing: Thing, job: object) -> timedelta | None:
    """Logs its start and end around a sleep of ``float(thing.name)`` seconds."""
    log = _log("test.slow", thing)
    time.sleep(float(thing.name))
    RunLog.objects.filter(pk=log.pk).update(ended=time.time())
    return timedelta(hours=1) if thing.status == "again" else None


@prescient.check("test.sleep_forever", model="testapp.Thing")
def sleep_forever(thing: Thing, job: object) -> None:
    time.sleep(3600)


@prescient.check("test.spin", model="testapp.Thing")
def spin(thing: Thing, job: object) -> None:
    while True:
        pass


@prescient.check("test.exit", model="testapp.Thing")
def hard_exit(thing: Thing, job: object) -> None:
    """Ends its process at once, as a crashing extension would."""
    import os

    os._exit(1)


@prescient.check("test.unstoppable", model="testapp.Thing")
def unstoppable(thing: Thing, job: object) -> None:
    """Spins with SIGALRM blocked: only killing its process stops it."""
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        pass


@prescient.check("test.cooperative", model="testapp.Thing", timeout_seconds=30)
def cooperative(thing: Thing, job: Any) -> object:
    """Works until asked to stop (for at most ``float(thing.name)`` seconds), then hands its claim
    back; logs its start and end."""
    log = _log("test.cooperative", thing)
    deadline = time.monotonic() + float(thing.name)
    while not job.should_stop() and time.monotonic() < deadline:
        time.sleep(0.01)
    RunLog.objects.filter(pk=log.pk).update(ended=time.time())
    return prescient.RELEASE if job.should_stop() else None


@prescient.check("test.checkpoint_crash", model="testapp.Thing", error_handler=retry_now)
def checkpoint_crash(thing: Thing, job: Any) -> None:
    """First run: checkpoints ``{"page": 17}``, then ends its process. The next run keeps what it
    found in ``thing.status``."""
    _log("test.checkpoint_crash", thing)
    if job.checkpoint_data is None:
        job.checkpoint({"page": 17})
        import os

        os._exit(1)
    Thing.objects.filter(pk=thing.pk).update(status=f"page={job.checkpoint_data['page']}")


# --- for tests/faults/ -------------------------------------------------------------------------
# Times there are read from CLOCK_MONOTONIC, which is one clock for every process of the host
# (the fault tests shift the wall clocks of some processes, never this one).


def _log_monotonic(name: str, thing: Thing) -> RunLog:
    import os

    return RunLog.objects.create(check_name=name, entity_key=str(thing.pk), pid=os.getpid(), started=time.monotonic())


@prescient.check("fault.slow", model="testapp.Thing")
def fault_slow(thing: Thing, job: object) -> None:
    """Sleeps ``float(thing.name)`` seconds between two monotonic stamps."""
    log = _log_monotonic("fault.slow", thing)
    time.sleep(float(thing.name))
    RunLog.objects.filter(pk=log.pk).update(ended=time.monotonic())


@prescient.check("fault.long", model="testapp.Thing", timeout_seconds=30)
def fault_long(thing: Thing, job: object) -> None:
    """Like fault.slow, with a timeout of its own far longer than the stale period under test."""
    fault_slow(thing, job)


@prescient.check("fault.bad", model="testapp.Thing", max_retries=0)
def fault_bad(thing: Thing, job: object) -> timedelta | None:
    """Produces what the database cannot store, as ``thing.name`` says."""
    _log_monotonic("fault.bad", thing)
    if thing.name == "max":
        return timedelta.max
    raise ValueError({"nul": "bad\x00text", "surrogate": "bad\udc80text", "huge": "h" * 5_000_000}[thing.name])


@prescient.check("fault.ignore_alarm", model="testapp.Thing", timeout_seconds=1)
def fault_ignore_alarm(thing: Thing, job: object) -> None:
    """Will not stop at its timeout: ignores SIGALRM and sleeps a minute."""
    import signal

    _log_monotonic("fault.ignore_alarm", thing)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    time.sleep(60)


@prescient.check("fault.allocate", model="testapp.Thing", max_retries=0)
def fault_allocate(thing: Thing, job: object) -> None:
    """Allocates ``thing.name`` megabytes (and touches them)."""
    _log_monotonic("fault.allocate", thing)
    block = bytearray(int(thing.name) * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])


@prescient.check("fault.in_c", model="testapp.Thing", timeout_seconds=1)
def fault_in_c(thing: Thing, job: object) -> None:
    """Stuck in C code (a key derivation of a billion rounds, the GIL released): its alarm is
    only handled when the call returns, minutes later; only killing its process stops it."""
    import hashlib

    _log_monotonic("fault.in_c", thing)
    hashlib.pbkdf2_hmac("sha256", b"stuck", b"in c", 10**9)


@prescient.check("fault.gate", model="testapp.Thing", timeout_seconds=60)
def fault_gate(thing: Thing, job: Any) -> timedelta | None:
    """Blocks until the file ``<thing.name>/<thing.pk>`` exists (the test opens the gate), at most
    a minute; re-checks in an hour when the thing's status is ``again``. Logs start and end."""
    from pathlib import Path

    log = _log_monotonic("fault.gate", thing)
    gate = Path(thing.name) / str(thing.pk)
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    RunLog.objects.filter(pk=log.pk).update(ended=time.monotonic())
    return timedelta(hours=1) if thing.status == "again" else None


@prescient.check("fault.quiet", model="testapp.Thing")
def fault_quiet(thing: Thing, job: object) -> None:
    """Uses no database: sleeps ``seconds`` and appends ``start end`` (monotonic) to the file
    ``<dir>/<thing.pk>``, where ``thing.name`` is ``<dir>|<seconds>``."""
    from pathlib import Path

    folder, seconds = thing.name.split("|")
    started = time.monotonic()
    time.sleep(float(seconds))
    with (Path(folder) / str(thing.pk)).open("a") as out:
        out.write(f"{started} {time.monotonic()}\n")


# --- for tests/faults/test_prune.py: an upkeep that prunes the history every N seconds ----------
# (the duty's interval is ten minutes; a process with PRESCIENT_TEST_PRUNE_EVERY set replaces it
# by one with that interval, as a host may register a duty of its own name).
def _prune_every(seconds: str) -> None:
    from prescient.maintenance import register
    from prescient.maintenance.history_pruner import HistoryPruner

    class EagerPruner(HistoryPruner):
        interval = float(seconds)

    register(EagerPruner())


if os.environ.get("PRESCIENT_TEST_PRUNE_EVERY"):
    _prune_every(os.environ["PRESCIENT_TEST_PRUNE_EVERY"])
# Declared only where a test asks for it (its child processes): a declared expectation adds its
# figures to every status, dashboard and metrics answer, which other tests count queries of.
if os.environ.get("PRESCIENT_TEST_EXPECTATION"):
    from .rungs import declare, declare_async, declare_race

    {"async": declare_async, "race": declare_race}.get(os.environ["PRESCIENT_TEST_EXPECTATION"], declare)()


# --- poison jobs (tests/faults/test_poison.py, tests/runtime/test_poison_processes.py) ----------


def _raise_handler(job: Any, check: Any, now: Any) -> None:
    raise RuntimeError("the handler's own bug")


def _naive_handler(job: Any, check: Any, now: Any) -> Any:
    from datetime import datetime

    return datetime(2030, 1, 1)  # naive, as a careless handler returns it


@prescient.check("fault.poison", model="testapp.Thing")
def fault_poison(thing: Thing, job: object) -> None:
    """Raises what ``thing.name`` says: ``exit`` SystemExit(0), ``exit2`` SystemExit(2),
    ``interrupt`` KeyboardInterrupt."""
    _log_monotonic("fault.poison", thing)
    if thing.name == "exit":
        raise SystemExit(0)
    if thing.name == "exit2":
        raise SystemExit(2)
    raise KeyboardInterrupt


@prescient.check("fault.handler_raises", model="testapp.Thing", error_handler=_raise_handler)
def fault_handler_raises(thing: Thing, job: object) -> None:
    raise ValueError("a plain failure")


@prescient.check("fault.handler_naive", model="testapp.Thing", error_handler=_naive_handler)
def fault_handler_naive(thing: Thing, job: object) -> None:
    raise ValueError("a plain failure")


@prescient.check("fault.crash", model="testapp.Thing", error_handler=retry_now)
def fault_crash(thing: Thing, job: object) -> None:
    """Ends its process, every time."""
    _log_monotonic("fault.crash", thing)
    os._exit(1)


# --- lanes (tests/runtime/test_lanes.py) -------------------------------------------------------


@prescient.check("lane.async_quiet", model="testapp.Thing")
async def lane_async_quiet(thing: Thing, job: object) -> None:
    """fault.quiet, awaited: sleeps ``seconds`` on the event loop and appends ``start end``
    (monotonic) to ``<dir>/<thing.pk>``, where ``thing.name`` is ``<dir>|<seconds>``."""
    import asyncio
    from pathlib import Path

    folder, seconds = thing.name.split("|")
    started = time.monotonic()
    await asyncio.sleep(float(seconds))
    with (Path(folder) / str(thing.pk)).open("a") as out:
        out.write(f"{started} {time.monotonic()}\n")


@prescient.check("lane.one_at_a_time", model="testapp.Thing", lanes=1)
def lane_one_at_a_time(thing: Thing, job: object) -> None:
    """fault.quiet for code that is not thread-safe: never two runs at once in a child."""
    fault_quiet(thing, job)


@prescient.check("lane.spin", model="testapp.Thing", timeout_seconds=1)
def lane_spin(thing: Thing, job: object) -> None:
    """Spins in Python past its timeout of 1 s (a CheckTimeout raised in its thread stops it)."""
    while True:
        pass


@prescient.check("lane.stuck", model="testapp.Thing", timeout_seconds=1)
def lane_stuck(thing: Thing, job: object) -> None:
    """Blocks in C past its timeout of 1 s: only killing its process stops it."""
    time.sleep(3600)


@prescient.check("lane.async_stuck", model="testapp.Thing", timeout_seconds=1)
async def lane_async_stuck(thing: Thing, job: object) -> None:
    """Awaits past its timeout of 1 s: cancelled on the loop."""
    import asyncio

    await asyncio.sleep(3600)


@prescient.check("lane.spread", model="testapp.Thing", spread=True)
def lane_spread(thing: Thing, job: object) -> None:
    """fault.quiet, spread over its slot (tests/faults/test_lanes.py)."""
    fault_quiet(thing, job)
