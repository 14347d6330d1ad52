"""The measurements on one database: ``python -m bench.suite --out FILE --sizes JSON``.

Started by :mod:`bench.run` with ``DJANGO_SETTINGS_MODULE=bench.settings`` and the scratch
database in ``BENCH_DATABASE_URL`` (or ``BENCH_SQLITE``). Every prescient figure is timed in
this process (no interpreter start-up counted); its raw-SQL baseline runs in the same process
on the same database, interleaved run by run with it, so that both see the same noise. Writes
``{figure key: [one value per run], ...}`` as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

import django  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

import prescient  # noqa: E402
from bench import churn, herd, io, limits, load, metrics, peers, prune, recurring, replay, scale  # noqa: E402
from bench import tasks as bench_tasks  # noqa: E402
from bench.models import Item, Parcel  # noqa: E402
from prescient.engine import bulk, store  # noqa: E402
from prescient.engine import sweep as engine_sweep  # noqa: E402
from prescient.engine import verbs as services  # noqa: E402
from prescient.engine.store import notify  # noqa: E402
from prescient.models import FutureJob, JobHistory, Worker  # noqa: E402
from prescient.runtime.tick import tick  # noqa: E402

NOOP, STAMP = "bench.noop", "bench.stamp"
RAW_JOB, RAW_INSERT = "bench_raw_job", "bench_raw_insert"
#: Entity keys of the idle base start here, above every key the other sections use.
BASE_KEY = 10_000_000


_STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"  [{connection.vendor} {time.monotonic() - _STARTED:5.1f}s] {message}", file=sys.stderr, flush=True)


def pg() -> bool:
    return connection.vendor == "postgresql"


def q(sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def db_value(model: Any, name: str, value: Any) -> Any:
    return model._meta.get_field(name).get_db_prep_save(value, connection)


# --- fixtures ----------------------------------------------------------------------------------


def series(first: int, last: int) -> tuple[str, list[Any]]:
    """A CTE ``g(x)`` of the integers first..last, and its parameters."""
    if pg():
        return "WITH g(x) AS (SELECT generate_series(%s::bigint, %s::bigint)) ", [first, last]
    return "WITH RECURSIVE g(x) AS (SELECT %s UNION ALL SELECT x + 1 FROM g WHERE x < %s) ", [first, last]


_items = 0


def ensure_items(count: int) -> None:
    """bench_item rows with ids 1..count."""
    global _items  # noqa: PLW0603 (a counter kept for the whole run)
    if count <= _items:
        return
    cte, params = series(_items + 1, count)
    # ON CONFLICT: bench.workflows imports this module a second time, with a counter of its own.
    q(f"{cte}INSERT INTO bench_item (id, stamp) SELECT x, NULL FROM g WHERE true ON CONFLICT DO NOTHING", params)
    _items = count


def add_jobs(first_key: int, count: int, due: datetime, check: str = NOOP, created: datetime | None = None) -> None:
    """``count`` scheduled jobs of ``check`` on items first_key.., due at ``due``, in one statement.

    Every column the model has is written: ours, or the field's default (so a field added to
    FutureJob later needs nothing here).
    """
    ours = {
        "entity_name": "bench.item", "job_exec": check, "state": "scheduled", "first_check_at": due,
        "next_check_at": due, "created_at": created or due,
    }
    columns, values, params = [], [], []
    for field in bulk.insert_fields(FutureJob):
        columns.append(connection.ops.quote_name(field.column))
        if field.attname == "entity_key":
            values.append("CAST(x AS TEXT)")
            continue
        value = ours[field.attname] if field.attname in ours else field.get_default()
        values.append("%s")
        params.append(field.get_db_prep_save(value, connection))
    cte, cte_params = series(first_key, first_key + count - 1)
    q(
        f"{cte}INSERT INTO prescient_futurejob ({', '.join(columns)}) SELECT {', '.join(values)} FROM g",
        [*cte_params, *params],
    )


def clear_jobs() -> None:
    if pg():
        q("TRUNCATE prescient_futurejob, prescient_jobhistory")
    else:
        q("DELETE FROM prescient_futurejob")
        q("DELETE FROM prescient_jobhistory")


def analyze(*tables: str) -> None:
    for table in tables:
        q(f"ANALYZE {table}")


def vacuum(*tables: str) -> None:
    if pg():
        for table in tables:
            q(f"VACUUM ANALYZE {table}")
    else:
        q("ANALYZE")


# --- the raw-SQL baseline: plain psycopg / sqlite3 ----------------------------------------------


class Raw:
    """A plain driver connection (autocommit) to the same database."""

    def __init__(self) -> None:
        settings = connection.settings_dict
        if pg():
            import psycopg

            self.conn: Any = psycopg.connect(
                dbname=settings["NAME"], user=settings.get("USER") or None,
                password=settings.get("PASSWORD") or None, host=settings.get("HOST") or None,
                port=settings.get("PORT") or None, autocommit=True,
            )
            self.mark = "%s"
        else:
            import sqlite3

            self.conn = sqlite3.connect(settings["NAME"], isolation_level=None, timeout=20)
            self.mark = "?"

    def run(self, sql: str, params: Any = ()) -> Any:
        cursor = self.conn.cursor()
        cursor.execute(sql.replace("%s", self.mark), params)
        return cursor

    def when(self, value: datetime) -> Any:
        """A time as this driver takes it (SQLite: Django's text form, for a fair comparison)."""
        return value if pg() else db_value(FutureJob, "next_check_at", value)

    def close(self) -> None:
        self.conn.close()


def create_raw_tables(raw: Raw) -> None:
    if pg():
        raw.run(f"DROP TABLE IF EXISTS {RAW_JOB}, {RAW_INSERT}")
        raw.run(
            f"CREATE TABLE {RAW_JOB} (id bigserial PRIMARY KEY, state varchar(16) NOT NULL, "
            "next_check_at timestamptz NOT NULL)"
        )
        raw.run(f"CREATE TABLE {RAW_INSERT} (LIKE prescient_futurejob INCLUDING ALL)")
    else:
        raw.run(f"DROP TABLE IF EXISTS {RAW_JOB}")
        raw.run(f"DROP TABLE IF EXISTS {RAW_INSERT}")
        raw.run(
            f"CREATE TABLE {RAW_JOB} (id integer PRIMARY KEY, state varchar(16) NOT NULL, "
            "next_check_at text NOT NULL)"
        )
        # The same table, constraints and indexes as prescient_futurejob, under other names.
        for (sql,) in raw.run(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'prescient_futurejob' AND sql IS NOT NULL "
            "ORDER BY type DESC"
        ).fetchall():
            raw.run(sql.replace("prescient_futurejob", RAW_INSERT).replace('"prescient_', '"bench_copy_'))
    # The index of prescient_job_due: the next due rows, in order, among scheduled ones.
    raw.run(f"CREATE INDEX {RAW_JOB}_next ON {RAW_JOB} (next_check_at, id) WHERE state = 'scheduled'")


def raw_fill(raw: Raw, count: int, due: datetime) -> None:
    """The raw table afresh (no dead rows left by an earlier run), with ``count`` rows due at ``due``."""
    raw.run(f"TRUNCATE {RAW_JOB}" if pg() else f"DELETE FROM {RAW_JOB}")
    cte, params = series(1, count)
    raw.run(f"{cte}INSERT INTO {RAW_JOB} (state, next_check_at) SELECT 'scheduled', %s FROM g",
            [*params, raw.when(due)])
    raw.run(f"VACUUM ANALYZE {RAW_JOB}" if pg() else f"ANALYZE {RAW_JOB}")


def raw_claim_sql() -> str:
    lock = " FOR UPDATE SKIP LOCKED" if pg() else ""
    return (
        f"SELECT id FROM {RAW_JOB} WHERE state = 'scheduled' AND next_check_at <= %s "
        f"ORDER BY next_check_at, id LIMIT 100{lock}"
    )


def raw_sweep(raw: Raw, now: datetime) -> int:
    """Claim batches of 100 due rows and delete them until none is left; returns the rows."""
    if pg():
        sql = f"DELETE FROM {RAW_JOB} WHERE id = ANY(ARRAY({raw_claim_sql()})) RETURNING id"
    else:
        sql = f"DELETE FROM {RAW_JOB} WHERE id IN ({raw_claim_sql()}) RETURNING id"
    when, done = raw.when(now), 0
    while True:
        rows = raw.run(sql, [when]).fetchall()
        if not rows:
            return done
        done += len(rows)


# --- helpers -----------------------------------------------------------------------------------


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = func()
    return time.perf_counter() - started, result


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Results:
    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(value)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    env["BENCH_KEEP_HISTORY"] = "1"  # only the bench's own process prunes (bench/settings.py)
    return env


# --- helper processes ----------------------------------------------------------------------------


class Agent:
    """A ``python -m bench.agent`` process, for measurements that need two processes at once."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.agent"], cwd=ROOT, env=child_env(), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )

    def wait_ready(self) -> Agent:
        if self.read() != {"ready": True}:
            raise RuntimeError("bench agent did not start")
        return self

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("bench agent died")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.send(cmd="quit")
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def together(agents: list[Agent], **command: Any) -> float:
    """Run ``command`` in every agent at the same instant; seconds from the first start to the last end."""
    go_at = time.time() + 0.3
    for agent in agents:
        agent.send(go_at=go_at, **command)
    answers = [agent.read() for agent in agents]
    return max(a["end"] for a in answers) - min(a["start"] for a in answers)


class WorkerRun:
    """A real ``manage.py prescient_worker`` process, started once and kept for many runs
    (``concurrency`` None: the command's default, one child per CPU)."""

    def __init__(
        self, concurrency: int | None = 1, extra: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        given = [] if concurrency is None else ["--concurrency", str(concurrency)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "prescient_worker", *given, *(extra or []), "-v", "0"],
            cwd=ROOT, env={**child_env(), **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )

    def wait_ready(self) -> None:
        """Until it has registered and found nothing due: idle, listening."""
        deadline = time.monotonic() + 120
        while not Worker.objects.filter(pid=self.proc.pid, stopped_at=None, last_slot_at__isnull=False).exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                stderr = self.proc.stderr.read() if self.proc.stderr else ""
                raise RuntimeError(f"prescient_worker did not start: {stderr}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def workers(count: int, concurrency: int | None = 1) -> Iterator[list[WorkerRun]]:
    started: list[WorkerRun] = []
    try:
        started = [WorkerRun(concurrency) for _ in range(count)]
        for worker in started:
            worker.wait_ready()
        yield started
    finally:
        for worker in started:
            worker.stop()


def wait_swept(timeout: float = 600) -> float:
    """Poll until nothing is due or running; returns the time.perf_counter() it was seen."""
    sql = (
        "SELECT EXISTS(SELECT 1 FROM prescient_futurejob WHERE state = 'running') "
        "OR EXISTS(SELECT 1 FROM prescient_futurejob WHERE state = 'scheduled' AND next_check_at <= %s)"
    )
    deadline = time.monotonic() + timeout
    while True:
        busy = q(sql, [db_value(FutureJob, "next_check_at", timezone.now())])[0][0]
        if not busy:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not finish in time")
        time.sleep(0.005)


def sweep_by_workers(count: int) -> float:
    """Make ``count`` jobs due (waking the idle workers), wait until swept; returns jobs per second."""
    clear_jobs()
    now = timezone.now()
    with transaction.atomic():
        add_jobs(1, count, now - timedelta(hours=1))
        notify()
    started = time.perf_counter()
    ended = wait_swept()
    swept = JobHistory.objects.count() + FutureJob.objects.filter(check_count=1).count()
    if swept != count:
        raise RuntimeError(f"workers swept {swept} of {count} jobs")
    return count / (ended - started)


# --- sections ----------------------------------------------------------------------------------


def statements(func: Callable[[], Any]) -> int:
    """How many SQL statements ``func()`` sends on the default connection (an ``executemany``
    counts once; the driver's own BEGIN and COMMIT of a transaction are not statements)."""
    sent = 0

    def counter(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal sent
        sent += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        func()
    return sent


def sweep(res: Results, raw: Raw, sizes: dict[str, Any], profile: str | None) -> None:
    count, runs = sizes["sweep"], sizes["runs"]
    ensure_items(count)
    analyze("bench_item")
    now = timezone.now()
    clear_jobs()
    tick(now)  # a first tick runs the upkeep duties due at a process's start: not counted
    add_jobs(1, count, now - timedelta(hours=1))
    summaries: list[Any] = []
    sent = statements(lambda: summaries.append(tick(now)))
    assert summaries[0].processed == count, summaries[0].line()
    res.add("sweep.statements", sent * 1000 / count)
    log(f"statements: {sent:,} for one tick over {count:,} due no-op checks (half end, half re-checked)")
    for run in range(runs):
        now = timezone.now()
        raw_fill(raw, count, now - timedelta(hours=1))
        seconds, done = timed(lambda: raw_sweep(raw, now))  # noqa: B023 (called at once)
        assert done == count, done
        res.add("raw.sweep", count / seconds)

        clear_jobs()
        add_jobs(1, count, now - timedelta(hours=1))
        vacuum("prescient_futurejob", "prescient_jobhistory")
        seconds, summary = timed(lambda: tick(now))  # noqa: B023 (called at once)
        assert summary.processed == count, summary.line()
        res.add("sweep.tick", count / seconds)
        log(f"sweep run {run + 1}/{runs}: raw {res.values['raw.sweep'][-1]:,.0f}/s, tick {count / seconds:,.0f}/s")
    if profile:
        profile_tick(count, profile)
    if not pg():
        return
    now = timezone.now()
    replay.measure(res, sizes, q=q, add_jobs=add_jobs, clear_jobs=clear_jobs, tick=tick, now=now,
                   due=now - timedelta(hours=1), log=log)
    agents = [agent.wait_ready() for agent in [Agent(), Agent()]]  # both start at once
    try:
        for run in range(runs):
            now = timezone.now()
            raw_fill(raw, count, now - timedelta(hours=1))
            res.add("raw.sweep2", count / together(agents, cmd="raw_sweep", now=now.isoformat()))
            clear_jobs()
            add_jobs(1, count, now - timedelta(hours=1))
            vacuum("prescient_futurejob", "prescient_jobhistory")
            res.add("sweep.ticks2", count / together(agents, cmd="tick", now=now.isoformat()))
            log(f"two processes run {run + 1}/{runs}: raw {res.values['raw.sweep2'][-1]:,.0f}/s, "
                f"ticks {res.values['sweep.ticks2'][-1]:,.0f}/s")
    finally:
        for agent in agents:
            agent.close()
    with workers(1) as (first,):
        for _run in range(runs):
            res.add("sweep.worker", sweep_by_workers(count))
        with workers(1):
            for _run in range(runs):
                res.add("sweep.workers2", sweep_by_workers(count))
        log(f"workers: one {statistics.median(res.values['sweep.worker']):,.0f}/s, "
            f"two {statistics.median(res.values['sweep.workers2']):,.0f}/s")
        latency(res, first, sizes)
        memory(res, first, sizes)
    with workers(1, concurrency=None):
        for _run in range(runs):
            res.add("sweep.worker_default", sweep_by_workers(count))
        log(f"one worker, default concurrency ({os.cpu_count()} children): "
            f"{statistics.median(res.values['sweep.worker_default']):,.0f}/s")
    clear_jobs()


def profile_tick(count: int, path: str) -> None:
    try:
        from pyinstrument import Profiler
    except ImportError:
        log("--profile needs pyinstrument: pip install pyinstrument")
        return
    now = timezone.now()
    clear_jobs()
    add_jobs(1, count, now - timedelta(hours=1))
    vacuum("prescient_futurejob", "prescient_jobhistory")
    profiler = Profiler(interval=0.0005)
    profiler.start()
    tick(now)
    profiler.stop()
    Path(path).write_text(profiler.output_text(unicode=False, color=False))
    log(f"profile of one tick over {count:,} jobs written to {path}")


def latency(res: Results, worker: WorkerRun, sizes: dict[str, Any]) -> None:
    """run_now → the check starts, with the worker idle; and PostgreSQL's own NOTIFY → LISTEN."""
    samples = sizes["latency"]
    clear_jobs()
    ensure_items(samples)
    Item.objects.filter(pk__lte=samples).update(stamp=None)
    now = timezone.now()
    add_jobs(1, samples, now + timedelta(days=1), check=STAMP, created=now)
    jobs = list(FutureJob.objects.order_by("pk").values_list("pk", "entity_key"))
    raw_latencies = notify_latencies(samples)
    ours: list[float] = []
    for pk, key in jobs:
        time.sleep(random.uniform(0.05, 0.1))  # idle, as a worker between wake-ups
        asked = time.time()
        services.run_now(pk)
        while True:
            stamp = Item.objects.filter(pk=int(key)).values_list("stamp", flat=True)[0]
            if stamp is not None:
                break
            if time.time() - asked > 30:
                raise RuntimeError("run_now was not picked up within 30 s")
            time.sleep(0.002)
        ours.append(stamp - asked)
    for name, values in (("latency", ours), ("raw.notify", raw_latencies)):
        res.values[f"{name}.p50"] = [percentile(values, 50)]
        res.values[f"{name}.p99"] = [percentile(values, 99)]
    log(f"run-now latency p50 {percentile(ours, 50) * 1000:.1f} ms, p99 {percentile(ours, 99) * 1000:.1f} ms")
    wait_swept()


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def notify_latencies(samples: int) -> list[float]:
    """NOTIFY from one plain connection to another LISTENing: the database's own wake-up time."""
    listener, sender = Raw(), Raw()
    listener.run("LISTEN bench_probe")
    received: list[float] = []
    ready = threading.Event()

    def listen() -> None:
        ready.set()
        for _ in listener.conn.notifies(stop_after=samples, timeout=60):
            received.append(time.time())

    thread = threading.Thread(target=listen)
    thread.start()
    ready.wait()
    sent = []
    for _ in range(samples):
        time.sleep(random.uniform(0.01, 0.03))
        sent.append(time.time())
        sender.run("SELECT pg_notify('bench_probe', '')")
        deadline = time.time() + 5
        while len(received) < len(sent) and time.time() < deadline:
            time.sleep(0.0005)
    thread.join(70)
    listener.close()
    sender.close()
    return [r - s for s, r in zip(sent, received, strict=False)]  # a lost notification is left out


def memory(res: Results, worker: WorkerRun, sizes: dict[str, Any]) -> None:
    """The worker's resident memory before and after each round of jobs (after a warm-up)."""
    count, rounds = sizes["memory"], sizes["memory_rounds"]
    ensure_items(count)
    sweep_by_workers(max(200, count // 100))  # warm-up: first-use imports and caches
    kids = children_of(worker.pid)
    for _ in range(rounds):
        before = rss_kb(worker.pid)
        kids_before = sum(rss_kb(pid) for pid in kids)
        sweep_by_workers(count)
        time.sleep(0.3)  # let the worker go idle again
        after = rss_kb(worker.pid)
        kids_after = sum(rss_kb(pid) for pid in kids)
        res.add("memory.before", before / 1024)
        res.add("memory.after", after / 1024)
        res.add("memory.growth", (after - before) / 1024)
        res.add("memory.children_growth", (kids_after - kids_before) / 1024)
        log(f"worker RSS {before / 1024:.1f} MB -> {after / 1024:.1f} MB over {count:,} jobs "
            f"(its child: {kids_before / 1024:.1f} -> {kids_after / 1024:.1f} MB)")
    clear_jobs()


def idle_and_scaling(res: Results, raw: Raw, sizes: dict[str, Any]) -> None:
    pending, runs, reps = sizes["pending"], sizes["runs"], sizes["idle_reps"]
    now = timezone.now()
    clear_jobs()
    log(f"loading {pending:,} pending jobs")
    add_jobs(BASE_KEY, pending, now + timedelta(days=7), created=now)
    vacuum("prescient_futurejob", "prescient_jobhistory")
    if pg():  # what the live table costs on disk, per million pending jobs (#36)
        heap, indexes = q("SELECT pg_table_size('prescient_futurejob'), pg_indexes_size('prescient_futurejob')")[0]
        res.add("idle.live_table_mb", heap / 2**20 / (pending / 1e6))
        res.add("idle.live_indexes_mb", indexes / 2**20 / (pending / 1e6))
        log(f"live table: {heap / 2**20:,.0f} MB, its indexes {indexes / 2**20:,.0f} MB for {pending:,} pending")
    raw_fill(raw, pending, now + timedelta(days=7))
    claim_sql, when = raw_claim_sql(), raw.when(now)
    for run in range(runs):
        probes = {
            "raw.claim_idle": lambda: raw.run(claim_sql, [when]).fetchall(),
            "idle.due_query": lambda: engine_sweep.survey(now),
            "idle.claim": lambda: store.claim(now, 100, "tick:bench:idle"),
            "idle.tick": lambda: tick(now),
        }
        if pg():
            # prescient's due query as a prepared statement: what it costs without being
            # planned anew at each call (Django binds parameters client-side, so it is).
            survey_sql, survey_params = engine_sweep._survey_statement(now, timedelta(minutes=2))
            probes["idle.due_query_prepared"] = lambda: raw.run(survey_sql, survey_params).fetchall()  # noqa: B023
        samples: dict[str, list[float]] = {key: [] for key in probes}
        for _ in range(reps):  # round robin, so that every probe sees the same noise
            for key, probe in probes.items():
                started = time.perf_counter()
                probe()
                samples[key].append(time.perf_counter() - started)
        for key, values in samples.items():
            res.add(key, statistics.median(values))
        log(f"idle run {run + 1}/{runs}: " + ", ".join(
            f"{k} {statistics.median(v) * 1e6:.0f} us" for k, v in samples.items()))
    if not pg():
        return
    base_max = FutureJob.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    for due in sizes["due"]:
        ensure_items(due)
        analyze("bench_item")
        for _run in range(runs):
            now = timezone.now()
            add_jobs(1, due, now - timedelta(hours=1))
            analyze("prescient_futurejob")
            seconds, summary = timed(lambda: tick(now))  # noqa: B023 (called at once)
            assert summary.processed == due, summary.line()
            res.add(f"scaling.tick.{due}", seconds)
            res.add(f"scaling.per_job.{due}", seconds / due * 1e6)
            q("DELETE FROM prescient_futurejob WHERE id > %s", [base_max])
            q("TRUNCATE prescient_jobhistory")
            vacuum("prescient_futurejob")
        per_job = statistics.median(res.values[f"scaling.per_job.{due}"])
        log(f"scaling {due:,} due among {pending:,}: {per_job:.1f} us/job")
    raw.run(f"TRUNCATE {RAW_JOB}" if pg() else f"DELETE FROM {RAW_JOB}")
    clear_jobs()


def scheduling(res: Results, raw: Raw, sizes: dict[str, Any]) -> None:
    one, many, runs = sizes["one"], sizes["many"], sizes["runs"]
    ensure_items(max(one, many))
    analyze("bench_item")
    items = list(Item.objects.filter(pk__lte=one).order_by("pk"))
    delay = timedelta(hours=1)
    fields = bulk.insert_fields(FutureJob)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    insert = f"INSERT INTO {RAW_INSERT} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"

    def raw_rows(count: int) -> list[list[Any]]:
        """The rows schedule() writes, as plain driver values."""
        now = timezone.now()
        due = services.due_time(prescient.get_check(NOOP), now, delay=delay)
        jobs = [
            store.new_job(entity_name="bench.item", entity_key=str(i), job_exec=NOOP, due=due, now=now)
            for i in range(1, count + 1)
        ]
        rows = []
        for job in jobs:
            row = []
            for field in fields:
                value = getattr(job, field.attname)
                if field.get_internal_type() == "JSONField":
                    value = json.dumps(value)
                elif isinstance(value, datetime):
                    value = raw.when(value)
                row.append(value)
            rows.append(row)
        return rows

    def raw_one(autocommit: bool) -> float:
        rows = raw_rows(one)
        raw.run(f"TRUNCATE {RAW_INSERT}" if pg() else f"DELETE FROM {RAW_INSERT}")
        sql = insert.replace("%s", raw.mark)
        started = time.perf_counter()
        cursor = raw.conn.cursor()
        if not autocommit:
            raw.run("BEGIN")
        for row in rows:
            cursor.execute(sql, row)
        if not autocommit:
            raw.run("COMMIT")
        return one / (time.perf_counter() - started)

    def raw_many() -> float:
        rows = raw_rows(many)
        raw.run(f"TRUNCATE {RAW_INSERT}" if pg() else f"DELETE FROM {RAW_INSERT}")
        started = time.perf_counter()
        raw.run("BEGIN")
        raw.conn.cursor().executemany(insert.replace("%s", raw.mark), rows)
        raw.run("COMMIT")
        return many / (time.perf_counter() - started)

    def ours_one(atomic: bool) -> float:
        clear_jobs()
        started = time.perf_counter()
        if atomic:
            with transaction.atomic():
                for item in items:
                    prescient.schedule(item, NOOP, delay=delay)
        else:
            for item in items:
                prescient.schedule(item, NOOP, delay=delay)
        return one / (time.perf_counter() - started)

    def ours_many() -> float:
        clear_jobs()
        started = time.perf_counter()
        created = prescient.schedule_many(Item.objects.filter(pk__lte=many), NOOP, delay=delay)
        rate = many / (time.perf_counter() - started)
        assert created == many, created
        return rate

    for run in range(runs):
        res.add("raw.insert_one_tx", raw_one(autocommit=False))
        res.add("schedule.one_tx", ours_one(atomic=True))
        res.add("raw.insert_one_autocommit", raw_one(autocommit=True))
        res.add("schedule.one_autocommit", ours_one(atomic=False))
        res.add("raw.executemany", raw_many())
        res.add("schedule.many", ours_many())
        log(f"scheduling run {run + 1}/{runs}: " + ", ".join(
            f"{k} {res.values[k][-1]:,.0f}/s" for k in (
                "raw.insert_one_tx", "schedule.one_tx", "raw.insert_one_autocommit",
                "schedule.one_autocommit", "raw.executemany", "schedule.many")))
    raw.run(f"TRUNCATE {RAW_INSERT}" if pg() else f"DELETE FROM {RAW_INSERT}")
    clear_jobs()
    sent = statements(lambda: [prescient.schedule(item, NOOP, delay=delay) for item in items])
    res.add("schedule.statements", sent * 1000 / one)
    clear_jobs()
    noop = getattr(bench_tasks, "noop", None)  # Django 6: prescient is the django.tasks backend
    if noop is not None:
        sent_tasks = statements(lambda: [noop.enqueue() for _ in range(one)])
        res.add("schedule.enqueue_statements", sent_tasks * 1000 / one)
        clear_jobs()
        log(f"statements per 1,000: schedule() {sent * 1000 / one:,.0f}, enqueue() {sent_tasks * 1000 / one:,.0f}")
    saves(res, items, runs)


def saves(res: Results, items: list[Item], runs: int) -> None:
    """save() of a model without an expectation (Item), and of one with an expectation (Parcel):
    with none pending, and with one pending that the save does not meet (either way one indexed
    statement more after the commit: the pending jobs, with the expectation's Q asked of the row
    beside them); and, as the floor of any such judgement, a plain save followed by a SELECT 1."""
    Parcel.objects.all().delete()
    parcels = Parcel.objects.bulk_create([Parcel() for _ in items])

    def save_all(rows: list[Any]) -> float:
        started = time.perf_counter()
        for row in rows:
            row.stamp = time.time()
            row.save(update_fields=["stamp"])
        return len(rows) / (time.perf_counter() - started)

    def save_and_ask(rows: list[Any]) -> float:
        """A plain save, then one more round trip: what any judgement that asks the database
        after the commit costs at least (#34: a watched save's ceiling against a plain one)."""
        started = time.perf_counter()
        for row in rows:
            row.stamp = time.time()
            row.save(update_fields=["stamp"])
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
        return len(rows) / (time.perf_counter() - started)

    for run in range(runs):
        clear_jobs()
        res.add("save.without", save_all(items))
        res.add("save.with_round_trip", save_and_ask(items))
        res.add("save.with_none_pending", save_all(parcels))
        for parcel in parcels:
            prescient.expect(parcel, "bench.parcel")
        res.add("save.with_pending", save_all(parcels))
        log(f"saves run {run + 1}/{runs}: " + ", ".join(
            f"{k} {res.values[k][-1]:,.0f}/s"
            for k in ("save.without", "save.with_round_trip", "save.with_none_pending", "save.with_pending")))
    clear_jobs()
    Parcel.objects.all().delete()


SECTIONS = (
    "sweep", "idle", "scheduling", "herd", "churn", "workflows", "recurring", "prune", "metrics", "peers", "io",
    "limits", "scale", "load",
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", required=True, help="JSON object of sizes")
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    sizes = json.loads(args.sizes)
    only = set(args.only.split(","))
    call_command("migrate", verbosity=0)
    res = Results()
    raw = Raw()
    try:
        create_raw_tables(raw)
        clear_jobs()
        if "sweep" in only:
            sweep(res, raw, sizes, args.profile)
        if "idle" in only:
            idle_and_scaling(res, raw, sizes)
        if "scheduling" in only:
            scheduling(res, raw, sizes)
        if "herd" in only:
            herd.measure(res, sizes, sys.modules[__name__])
        if "churn" in only:
            churn.measure(res, sizes, sys.modules[__name__])
        if "workflows" in only:
            from bench.workflows import fanout  # it builds on this module's helpers

            fanout(res, sizes)
        if "recurring" in only:
            recurring.measure(res, sizes, sys.modules[__name__])
        if "prune" in only:
            prune.measure(res, sizes, sys.modules[__name__])
            prune.measure_day(res, sizes, sys.modules[__name__])
        if "metrics" in only:
            metrics.measure(res, sizes, sys.modules[__name__])
        if "peers" in only:
            peers.measure(res, sizes, sys.modules[__name__])
        if "io" in only:
            io.measure(res, sizes, sys.modules[__name__])
        if "limits" in only:
            limits.measure(res, sizes, sys.modules[__name__])
        if "scale" in only:
            scale.measure(res, sizes, sys.modules[__name__])
        if "load" in only:
            load.measure(res, sizes, sys.modules[__name__])
    finally:
        raw.close()
    Path(args.out).write_text(json.dumps(res.values))


if __name__ == "__main__":
    main()
