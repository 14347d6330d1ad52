"""The fault suite: real workers and ticks on PostgreSQL, each case bounded in time.

Run it alone with ``make faults``; the test command runs it with the rest of the suite.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from prescient.models import FutureJob
from tests.conftest import ROOT, database_env
from tests.testapp.models import RunLog, Thing

#: Quick heartbeats and a short stale period, so that a lost lease shows within seconds.
FAST = {"WORKER_HEARTBEAT_SECONDS": 0.5, "WORKER_POLL_SECONDS": 0.2, "STALE_AFTER_SECONDS": 4, "TIMEOUT_SECONDS": 5}
SKEWED_CLOCK = Path(__file__).parent / "skewed_clock"


class Processes:
    """Workers and ticks in processes of their own, output in files, killed at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, command: str, *args: str, settings: dict[str, Any] | None = None,
              clock_offset: float = 0.0, env_extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        env = {**database_env(), **(env_extra or {})}
        env["PRESCIENT_TEST_SETTINGS"] = json.dumps({**FAST, **(settings or {})})
        if clock_offset:
            env["PYTHONPATH"] = f"{SKEWED_CLOCK}:{env['PYTHONPATH']}"
            env["PRESCIENT_FAKE_CLOCK_OFFSET"] = str(clock_offset)
        n = len(self.procs)
        with open(self.tmp_path / f"p{n}.out", "wb") as out, open(self.tmp_path / f"p{n}.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "django", command, "--settings=tests.settings", "-v", "2", *args],
                cwd=ROOT, env=env, stdout=out, stderr=err,
            )
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        n = self.procs.index(proc)
        return (self.tmp_path / f"p{n}.out").read_text() + (self.tmp_path / f"p{n}.err").read_text()

    def finish(self, proc: subprocess.Popen[bytes], timeout: float) -> int:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"process did not exit within {timeout}s:\n{self.output(proc)}") from None

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    pool = Processes(tmp_path)
    yield pool
    pool.cleanup()


def seed(count: int, check: str, name: str = "0.1", due_in: timedelta = -timedelta(hours=1)) -> list[Thing]:
    """``count`` things, each with a job of ``check`` due at ``due_in`` from now."""
    things = Thing.objects.bulk_create([Thing(name=name) for _ in range(count)])
    due = timezone.now() + due_in
    FutureJob.objects.bulk_create(
        FutureJob(
            entity_name="testapp.thing", entity_key=str(t.pk), job_exec=check,
            first_check_at=due, next_check_at=due, created_at=due,
        )
        for t in things
    )
    return things


def children_of(pid: int) -> list[int]:
    """The pids of the processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def sigkill_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker and wait until its children are gone too: they die with it
    (``PR_SET_PDEATHSIG``), but a child may still write its parcel for a moment, and what the
    worker held is only known once nothing of it runs."""
    children = children_of(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children), 10, what="its children to die")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str = "condition") -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - started


def runs_per_entity(check: str) -> dict[str, list[RunLog]]:
    runs: dict[str, list[RunLog]] = defaultdict(list)
    for log in RunLog.objects.filter(check_name=check).order_by("started"):
        runs[log.entity_key].append(log)
    return runs


def overlapping(check: str) -> list[str]:
    """Entities with two runs at the same time (by the host's monotonic clock)."""
    found = []
    for key, logs in runs_per_entity(check).items():
        for first, second in itertools.pairwise(logs):
            if first.ended is None or second.started < first.ended:
                found.append(key)
    return found


def run_intervals(folder: Path) -> list[tuple[float, float]]:
    """The ``(start, end)`` of every run that wrote to ``folder`` (fault.quiet and its kin: one
    ``start end`` line per run, by the host's monotonic clock, in a file per entity or process)."""
    found = []
    for path in folder.iterdir():
        if path.name.isdigit():
            for line in path.read_text().splitlines():
                start, end = line.split()
                found.append((float(start), float(end)))
    return found


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most of ``intervals`` that overlap at any instant (an end before a start at a tie)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most
