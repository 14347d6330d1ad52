"""prescient against Django's reference database backend, ``django-tasks-db``, in the same run.

Both are django.tasks backends, so both run the same no-op task (``bench.tasks.noop``) on the
same PostgreSQL database: prescient's ``PrescientBackend`` with ``prescient_worker``, and
django-tasks-db's ``DatabaseBackend`` with its ``db_worker`` (polling every 0.1 s rather than
its default second, which only helps it). django-tasks-db's worker closes its connection after
each task unless Django's ``CONN_MAX_AGE`` is None, so it is measured both ways. Needs the
optional ``bench`` extra (``pip install -e '.[bench]'``; ``make bench`` installs it) and
Django 6; without them the section says so and is skipped.

Figures (tasks per second, or seconds): ``enqueue()`` one by one; a worker's start-up (launched
with one task due, to that task done: an upper bound of the time to its first claim); draining N
due tasks with one
and with two worker processes; an idle worker's poll with M future tasks in the table; and
draining 300 due tasks that sit behind those M.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from datetime import timedelta
from types import ModuleType
from typing import Any

from django.db import transaction
from django.utils import timezone


def _dtdb_table() -> str:
    from django_tasks_db.models import DBTaskResult

    return DBTaskResult._meta.db_table


def available() -> bool:
    try:
        import django.tasks  # noqa: F401
        import django_tasks_db  # noqa: F401
    except ImportError:
        return False
    from django.conf import settings

    return "dtdb" in getattr(settings, "TASKS", {})


class DbWorker:
    """django-tasks-db's ``manage.py db_worker`` in a process of its own."""

    def __init__(self, S: ModuleType, conn_max_age: str) -> None:
        env = S.child_env()
        env["BENCH_CONN_MAX_AGE"] = conn_max_age
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "db_worker", "--backend", "dtdb", "--interval", "0.1",
             "--no-startup-delay", "-v", "0"],
            cwd=S.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _clear(S: ModuleType) -> None:
    S.clear_jobs()
    S.q(f"TRUNCATE {_dtdb_table()}")


def _done(S: ModuleType, backend: str) -> int:
    if backend == "prescient":
        return int(S.q("SELECT count(*) FROM prescient_jobhistory WHERE outcome = 'completed'")[0][0])
    return int(S.q(f"SELECT count(*) FROM {_dtdb_table()} WHERE status = 'SUCCESSFUL'")[0][0])


def _wait_done(S: ModuleType, backend: str, count: int, timeout: float = 900) -> float:
    deadline = time.monotonic() + timeout
    while _done(S, backend) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{backend}: {_done(S, backend)} of {count} tasks done after {timeout}s")
        time.sleep(0.01)
    return time.perf_counter()


def _enqueue(backend: str, count: int) -> None:
    from bench.tasks import noop

    task = noop if backend == "prescient" else noop.using(backend="dtdb")
    for _ in range(count):
        task.enqueue()


def drain(S: ModuleType, backend: str, processes: int, count: int, conn_max_age: str = "0") -> float:
    """Start ``processes`` idle workers, then enqueue ``count`` due tasks in one transaction;
    tasks per second from its commit until the last is done."""
    _clear(S)
    workers: list[Any] = []
    try:
        if backend == "prescient":
            workers = [S.WorkerRun(1) for _ in range(processes)]
            for worker in workers:
                worker.wait_ready()
        else:
            workers = [DbWorker(S, conn_max_age) for _ in range(processes)]
        _enqueue(backend, 1)  # a probe: every worker is up and polling
        _wait_done(S, backend, 1, timeout=120)
        with transaction.atomic():
            _enqueue(backend, count)
        started = time.perf_counter()
        ended = _wait_done(S, backend, count + 1)
        return count / (ended - started)
    finally:
        for worker in workers:
            worker.stop()


def _fill_future(S: ModuleType, count: int) -> None:
    """``count`` tasks due in a week in each backend's table, copied from one enqueued each."""
    from bench.tasks import noop

    later = timezone.now() + timedelta(days=7)
    noop.using(run_after=later).enqueue()
    noop.using(backend="dtdb", run_after=later).enqueue()
    columns = [c for (c,) in S.q(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'prescient_futurejob' "
        "AND column_name NOT IN ('id', 'entity_key')"
    )]
    cols = ", ".join(f'"{c}"' for c in columns)
    S.q(f"INSERT INTO prescient_futurejob ({cols}, entity_key) SELECT {cols}, 'future-' || x FROM "
        f"prescient_futurejob, generate_series(1, %s) AS x", [count - 1])
    columns = [c for (c,) in S.q(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND column_name <> 'id'",
        [_dtdb_table()],
    )]
    cols = ", ".join(f'"{c}"' for c in columns)
    S.q(f"INSERT INTO {_dtdb_table()} (id, {cols}) SELECT gen_random_uuid(), {cols} FROM {_dtdb_table()}, "
        f"generate_series(1, %s)", [count - 1])
    S.q("VACUUM ANALYZE prescient_futurejob")
    S.q(f"VACUUM ANALYZE {_dtdb_table()}")


def _polls(S: ModuleType, reps: int) -> tuple[float, float]:
    """Median seconds of an idle poll: prescient's worker look (survey, then a claim that finds
    nothing) and django-tasks-db's (its worker loop's locked fetch of the next ready task)."""
    from django_tasks_db.models import DBTaskResult
    from django_tasks_db.utils import exclusive_transaction

    from prescient.engine import store

    def ours() -> None:
        survey = S.engine_sweep.survey()
        store.claim(survey.clock, 1, "worker:bench-idle/1")

    def theirs() -> None:
        with exclusive_transaction():
            DBTaskResult.objects.ready().filter(backend_name="dtdb", queue_name="default").get_locked()

    samples: dict[str, list[float]] = {"ours": [], "theirs": []}
    for _ in range(reps):
        for name, probe in (("ours", ours), ("theirs", theirs)):
            started = time.perf_counter()
            probe()
            samples[name].append(time.perf_counter() - started)
    return statistics.median(samples["ours"]), statistics.median(samples["theirs"])


def start_up(S: ModuleType, backend: str) -> float:
    """Seconds from launching a worker (the command's defaults) with one task due to that task
    done: an upper bound of its start-up before its first claim."""
    _clear(S)
    _enqueue(backend, 1)
    launched = time.perf_counter()
    worker = S.WorkerRun(None) if backend == "prescient" else DbWorker(S, "0")
    try:
        return _wait_done(S, backend, 1, timeout=120) - launched
    finally:
        worker.stop()


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    if not available():
        S.log("peers: django-tasks-db is not installed (pip install -e '.[bench]') or Django < 6: skipped")
        return
    runs, one, count, future = min(sizes["runs"], 2), sizes["one"], sizes["peer_drain"], sizes["peer_future"]
    for _run in range(runs):
        for backend in ("prescient", "dtdb"):
            _clear(S)
            seconds, _ = S.timed(lambda: _enqueue(backend, one))  # noqa: B023 (called at once)
            res.add(f"peers.enqueue.{backend}", one / seconds)
    S.log(f"peers: enqueue() one by one: prescient {statistics.median(res.values['peers.enqueue.prescient']):,.0f}/s, "
          f"django-tasks-db {statistics.median(res.values['peers.enqueue.dtdb']):,.0f}/s")
    for _run in range(sizes["runs"]):
        for backend in ("prescient", "dtdb"):
            res.add(f"peers.startup.{backend}", start_up(S, backend))
    S.log(f"peers: worker start-up to its first task done: prescient "
          f"{statistics.median(res.values['peers.startup.prescient']):.2f} s, django-tasks-db "
          f"{statistics.median(res.values['peers.startup.dtdb']):.2f} s")
    for processes in (1, 2):
        for _run in range(runs):
            res.add(f"peers.drain{processes}.prescient", drain(S, "prescient", processes, count))
            res.add(f"peers.drain{processes}.dtdb", drain(S, "dtdb", processes, count, "0"))
            res.add(f"peers.drain{processes}.dtdb_kept", drain(S, "dtdb", processes, count, "none"))
        S.log(f"peers: drain of {count:,} with {processes} process(es): " + ", ".join(
            f"{k} {statistics.median(res.values[f'peers.drain{processes}.{k}']):,.0f}/s"
            for k in ("prescient", "dtdb", "dtdb_kept")))
    _clear(S)
    S.log(f"peers: loading {future:,} future tasks into each table")
    _fill_future(S, future)
    for _run in range(runs):
        ours, theirs = _polls(S, sizes["idle_reps"])
        res.add("peers.poll.prescient", ours)
        res.add("peers.poll.dtdb", theirs)
    ours, theirs = (statistics.median(res.values[f"peers.poll.{k}"]) * 1e3 for k in ("prescient", "dtdb"))
    S.log(f"peers: idle poll behind {future:,}: prescient {ours:.2f} ms, django-tasks-db {theirs:.2f} ms")
    behind = 300 if count >= 300 else count
    for _run in range(runs):
        for backend, key in (("prescient", "prescient"), ("dtdb", "dtdb_kept")):
            S.q("DELETE FROM prescient_jobhistory")
            S.q(f"DELETE FROM {_dtdb_table()} WHERE status <> 'READY'")
            res.add(f"peers.behind.{key}", _drain_behind(S, backend, behind))
    ours, theirs = (statistics.median(res.values[f"peers.behind.{k}"]) for k in ("prescient", "dtdb_kept"))
    S.log(f"peers: {behind} due behind {future:,}: prescient {ours:,.0f}/s, django-tasks-db {theirs:,.0f}/s")
    _clear(S)


def _drain_behind(S: ModuleType, backend: str, count: int) -> float:
    """Like :func:`drain` with one process, the future tasks left in place."""
    done_before = _done(S, backend)
    if backend == "prescient":
        worker: Any = S.WorkerRun(1)
        worker.wait_ready()
    else:
        worker = DbWorker(S, "none")
    try:
        _enqueue(backend, 1)
        _wait_done(S, backend, done_before + 1, timeout=120)
        with transaction.atomic():
            _enqueue(backend, count)
        started = time.perf_counter()
        ended = _wait_done(S, backend, done_before + 1 + count)
        return count / (ended - started)
    finally:
        worker.stop()
