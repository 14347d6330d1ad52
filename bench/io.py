"""Checks that wait on the world (issue #33): N due jobs whose work is a wait of ``BENCH_WAIT_MS``
(default 50 ms, a call to a partner's API), one ``prescient_worker`` by its lanes in all (one
child per CPU, as the command starts by default, the lanes shared among them; one lane: one
child).
The floor is what the lanes could do if prescient cost nothing: ``lanes / wait`` jobs per second.
The rate is measured between 10% and 90% done (every lane started, none idle for want of work);
the worker's memory is the RSS of all its processes at their largest meanwhile. The peer's row
is django-tasks-db's ``db_worker`` (one task at a time per process) on the same wait, when the
``bench`` extra is installed (Django 6).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

#: The wait of each run, in seconds (bench.wait, bench.await).
WAIT = float(os.environ.get("BENCH_WAIT_MS", "50")) / 1000


def rss_mb(pid: int) -> float:
    """The resident memory of ``pid`` and its children, in MB (Linux /proc)."""
    total = 0
    pids = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                pids.append(int(entry.name))
    for each in pids:
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Progress(threading.Thread):
    """Samples how many of ``count`` jobs have ended, and the worker's memory, until all have."""

    def __init__(self, S: ModuleType, count: int, pid: int, table: str = "prescient_jobhistory") -> None:
        super().__init__(name="bench-io-progress", daemon=True)
        self.S, self.count, self.pid, self.table = S, count, pid, table
        self.samples: list[tuple[float, int]] = []
        self.rss = 0.0

    def run(self) -> None:
        try:
            done, looked = 0, 0.0
            while done < self.count:
                done = self.S.q(f"SELECT count(*) FROM {self.table}")[0][0]
                self.samples.append((time.perf_counter(), done))
                if time.monotonic() - looked > 0.5:  # reading /proc costs: twice a second
                    looked = time.monotonic()
                    self.rss = max(self.rss, rss_mb(self.pid))
                # A count scans the table: often enough for a rate over seconds, rarely enough to
                # take little from the worker measured.
                time.sleep(0.1)
        finally:
            connection.close()

    def rate(self) -> float:
        """Jobs per second between 10% and 90% done."""
        low = next(t for t, done in self.samples if done >= self.count * 0.1)
        high = next(t for t, done in self.samples if done >= self.count * 0.9)
        return self.count * 0.8 / (high - low)


def children_for(lanes: int) -> int:
    """The children of one worker with ``lanes`` lanes in all: one per CPU (the command's
    default), each with its share of the lanes; one lane is one child."""
    return max(1, min(os.cpu_count() or 1, lanes))


def drain(S: ModuleType, check: str, lanes: int, count: int) -> tuple[float, float]:
    """One worker with ``lanes`` lanes in all (one child per CPU, the lanes shared among them),
    idle, then ``count`` jobs of ``check`` made due at once; returns (jobs per second between 10%
    and 90%, the worker's largest RSS in MB, all its processes)."""
    S.clear_jobs()
    S.ensure_items(count)
    children = children_for(lanes)
    worker = S.WorkerRun(children, extra=["--lanes", str(lanes // children)])
    try:
        worker.wait_ready()
        progress = Progress(S, count, worker.pid)
        with transaction.atomic():
            S.add_jobs(1, count, timezone.now() - timedelta(minutes=15), check=check)
            S.notify()
        progress.start()
        progress.join(600)
        if progress.is_alive():
            raise RuntimeError(f"the worker with {lanes} lanes did not finish {count} jobs in 10 minutes")
        return progress.rate(), progress.rss
    finally:
        worker.stop()


def peer(S: ModuleType, count: int) -> float:
    """django-tasks-db's db_worker (one process, one task at a time) on the same wait: jobs per
    second between 10% and 90% done."""
    from bench import peers

    if not peers.available():
        return 0.0
    from bench.tasks import wait as wait_task

    peers._clear(S)
    worker = peers.DbWorker(S, "none")
    try:
        time.sleep(1.0)  # its start-up (it polls every 0.1 s)
        task = wait_task.using(backend="dtdb")
        with transaction.atomic():
            for _ in range(count):
                task.enqueue()
        progress = Progress(S, count, worker.proc.pid, f"{peers._dtdb_table()} WHERE status = 'SUCCESSFUL'")
        progress.start()
        progress.join(900)
        return progress.rate()
    finally:
        worker.stop()
        peers._clear(S)


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    for lanes in sizes["io_lanes"]:
        count = max(sizes["io_min"], lanes * sizes["io_per_lane"])
        for check, key in (("bench.wait", "io.lanes"), ("bench.await", "io.async")):
            if key == "io.async" and lanes not in sizes["io_async_lanes"]:
                continue
            rate, rss = drain(S, check, lanes, count)
            res.add(f"{key}.{lanes}", rate)
            res.add(f"{key}.rss.{lanes}", rss)
            S.log(f"io: {check} {WAIT * 1e3:g} ms, {children_for(lanes)} child(ren), {lanes} lanes in all: "
                  f"{rate:,.0f}/s "
                  f"({rate / (lanes / WAIT):.2f} of the floor), {rss:,.0f} MB")
        res.add(f"io.floor.{lanes}", lanes / WAIT)
    rate = peer(S, max(sizes["io_min"], sizes["io_per_lane"]))
    if rate:
        res.add("io.peer.dtdb", rate)
        S.log(f"io: django-tasks-db db_worker, 1 process: {rate:,.0f}/s")
    S.clear_jobs()
