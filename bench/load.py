"""Past one machine (#36 item 5): what the primary does per job, measured where it is done.

    python -m bench --only load --no-sqlite [--set load_jobs=20000 --set load_concurrency=1,2]

For ``load_jobs`` due no-op checks (``bench.noop``: half end, half are re-checked in an hour)
drained by one real ``prescient_worker`` of each ``load_concurrency`` (children, default lanes),
then by one in-process tick, and for the same number of jobs inserted:

- **statements** the primary received, counted in every process that sent them
  (:mod:`bench.counting`: Django's ``execute_wrapper`` on every connection, one file per
  process), since pg_stat_statements needs a server restart to load;
- **transactions**: ``xact_commit + xact_rollback`` of ``pg_stat_database`` for the scratch
  database, read on a connection to the ``postgres`` database after ``pg_stat_clear_snapshot()``,
  the bench process's own (its connection, its insert, its polls) taken off. A backend reports
  its counts at most once a second, and at its exit: the bench closes its connection before
  each reading, and the workers' children close theirs when idle;
- **WAL bytes**: ``pg_current_wal_lsn()`` before and after is the whole cluster's, and on a
  shared server other clients write meanwhile (their share is the ``load.noise`` row). Where
  ``pg_waldump`` and the server's ``pg_wal`` directory can be read (the bench on the database's
  host, as a superuser), the WAL of the window is read back and only this database's records
  are summed: those whose block references name its OID, and the commit records of the
  transactions that wrote them (full-page images included). Elsewhere the rows fall back to
  the cluster's figure, and the log says so;
- the most connections to the scratch database at once during the drain, and the drain's rate.

Each per-1,000-jobs figure is also the primary's load per second at 1,000 jobs a second.
PostgreSQL only.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from bench import counting

#: Seconds the cluster is watched with nothing of the bench running (its other clients' WAL).
NOISE_SECONDS = 3.0
#: Seconds for a backend that has exited to have reported its counts.
SETTLE_SECONDS = 0.5
RECORD = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+)")
LSN = re.compile(r"lsn: ([0-9A-F]+/[0-9A-F]+)")


class Primary:
    """The primary's counters, read on a connection to the server's ``postgres`` database (so
    that reading them adds nothing to the scratch database's own)."""

    def __init__(self) -> None:
        import psycopg

        settings = connection.settings_dict
        params = {"dbname": "postgres", "user": settings.get("USER") or None,
                  "password": settings.get("PASSWORD") or None, "host": settings.get("HOST") or None,
                  "port": settings.get("PORT") or None}
        self.conn: Any = psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v})
        self.name = settings["NAME"]
        self.oid = self.one("SELECT oid FROM pg_database WHERE datname = %s", [self.name])
        self.waldump, self.waldir = self._waldump()

    def one(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql, params).fetchone()[0]

    def _waldump(self) -> tuple[str | None, Path | None]:
        """pg_waldump and the server's pg_wal, if this process can read them."""
        try:
            data = Path(self.one("SHOW data_directory")) / "pg_wal"
        except Exception:  # not a superuser (nor pg_read_all_settings): no path
            return None, None
        major = int(self.one("SHOW server_version_num")) // 10000
        found = shutil.which("pg_waldump") or next(
            (str(p) for p in [Path(f"/usr/lib/postgresql/{major}/bin/pg_waldump")] if p.exists()), None)
        if found is None or not os.access(data, os.R_OK | os.X_OK):
            return None, None
        return found, data

    def lsn(self) -> tuple[str, int]:
        row = self.conn.execute("SELECT pg_current_wal_lsn()::text, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"
                                "::bigint").fetchone()
        return row[0], int(row[1])

    def transactions(self) -> int:
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(self.one("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                            [self.name]))

    def follow(self, start: str) -> WalReader | None:
        """This database's WAL from ``start`` on, read as it is written (None: it cannot be)."""
        return None if self.waldump is None else WalReader(self.waldump, self.waldir, start, self.oid)

    def close(self) -> None:
        self.conn.close()


def lsn_int(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


class WalReader(threading.Thread):
    """``pg_waldump --follow`` from an LSN, filtered by ``grep`` to this database's records and
    the transaction records: the segments are read while they are written, since on a busy
    shared cluster a checkpoint may recycle them seconds after. :meth:`until` gives the bytes
    of this database's records (and of its transactions' commits) up to an LSN."""

    def __init__(self, waldump: str, waldir: Path | None, start: str, oid: int) -> None:
        super().__init__(name="bench-load-wal", daemon=True)
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        # From a little before ``start``: at the very end of the WAL (a quiet cluster) pg_waldump
        # finds no record after its start and gives up; the records before ``start`` are left out.
        self.begin = lsn_int(start)
        back = max(self.begin - 2**20, self.begin - self.begin % (16 * 2**20))
        where = f"{back >> 32:X}/{back & 0xFFFFFFFF:X}"
        self.dump = subprocess.Popen([waldump, "--follow", "-p", str(waldir), "-s", where],
                                     stdout=subprocess.PIPE, stderr=self.errors)
        self.grep = subprocess.Popen(["grep", "--line-buffered", "-E", rf"rel [0-9]+/{oid}/|rmgr: Transaction"],
                                     stdin=self.dump.stdout, stdout=subprocess.PIPE, text=True)
        assert self.dump.stdout is not None
        self.dump.stdout.close()  # grep's now
        self.oid = oid
        self.records: list[tuple[int, int, int, bool]] = []  # (lsn, bytes, xid, a transaction record)
        self.seen = 0  # the last LSN read
        self.why = ""  # what pg_waldump said when it stopped short
        self.start()

    def run(self) -> None:
        assert self.grep.stdout is not None
        for line in self.grep.stdout:
            found = RECORD.search(line)
            at = LSN.search(line)
            if found and at:
                self.seen = lsn_int(at.group(1))
                self.records.append((self.seen, int(found.group(1)), int(found.group(2)),
                                     "rmgr: Transaction" in line))

    def until(self, end: str, timeout: float = 30.0) -> int | None:
        """The bytes up to ``end``, once read that far (None: not within ``timeout``)."""
        stop, deadline = lsn_int(end), time.monotonic() + timeout
        while self.seen < stop and time.monotonic() < deadline and self.dump.poll() is None:
            time.sleep(0.05)
        if self.seen < stop and self.dump.poll() is not None:  # it stopped short: a segment gone
            self.errors.seek(0)
            self.why = self.errors.read().decode(errors="replace").strip()[-300:]
            return None
        mine = [r for r in self.records if self.begin <= r[0] < stop]
        xids = {xid for _lsn, _size, xid, txn in mine if not txn and xid}
        return sum(size for _lsn, size, xid, txn in mine if not txn or xid in xids)

    def close(self) -> None:
        for proc in (self.dump, self.grep):
            if proc.poll() is None:
                proc.terminate()
            proc.wait(10)
        self.join(10)
        self.errors.close()


@dataclass
class Mark:
    lsn: str
    wal: int
    transactions: int
    statements: int


def mark(primary: Primary, counted: Path | None) -> Mark:
    """The counters now. The bench's own connection is closed first, so that its counts are in."""
    connection.close()
    time.sleep(SETTLE_SECONDS)
    lsn, wal = primary.lsn()
    return Mark(lsn, wal, primary.transactions(), counting.total(counted) if counted else 0)


@dataclass
class Window:
    transactions: int
    statements: int
    wal: int | None  # this database's; the cluster's where pg_waldump cannot be run; None: it failed
    cluster_wal: int


def window(a: Mark, b: Mark, ours: int, reader: WalReader | None) -> Window:
    """What happened between two marks, less ``ours`` (the bench process's own transactions);
    the WAL is this database's where ``reader`` read it, else the cluster's."""
    cluster = b.wal - a.wal
    if reader is None:
        return Window(b.transactions - a.transactions - ours, b.statements - a.statements, cluster, cluster)
    own = reader.until(b.lsn)
    reader.close()
    if own is None:
        log_failure(reader.why)
    return Window(b.transactions - a.transactions - ours, b.statements - a.statements, own, cluster)


def log_failure(why: str) -> None:
    import sys

    why = why or "a WAL segment recycled before it was read?"
    print(f"  load: pg_waldump stopped short of the window's end ({why}): no WAL figure of this database "
          "for this run", file=sys.stderr, flush=True)


def connect_cost(primary: Primary) -> int:
    """Transactions the bench process's connecting (and closing) counts by itself."""
    a = mark(primary, None)
    connection.ensure_connection()
    b = mark(primary, None)
    return b.transactions - a.transactions


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    count, runs = sizes["load_jobs"], sizes["runs"]
    S.ensure_items(count)
    S.analyze("bench_item")
    primary = Primary()
    counted = Path(tempfile.mkdtemp(prefix="prescient-bench-statements-"))
    try:
        if primary.waldump is None:
            S.log("load: pg_waldump or the server's pg_wal cannot be read here: the WAL rows are the whole "
                  "cluster's (pg_current_wal_lsn), other clients' writes included")
        connecting = connect_cost(primary)
        a = mark(primary, None)
        time.sleep(NOISE_SECONDS)
        b = mark(primary, None)
        res.add("load.noise", (b.wal - a.wal) / NOISE_SECONDS / 2**20)
        S.log(f"load: the cluster wrote {(b.wal - a.wal) / NOISE_SECONDS / 2**20:,.1f} MB/s of WAL with nothing "
              f"of the bench running; connecting counts {connecting} transaction(s)")
        for concurrency in sizes["load_concurrency"]:
            workers(res, S, primary, counted / str(concurrency), count, runs, concurrency, connecting,
                    idle=concurrency == max(sizes["load_concurrency"]), idle_seconds=sizes["load_idle_seconds"])
        inserts(res, S, primary, min(count, sizes["one"]), runs, connecting)
        ticks(res, S, primary, counted / "tick", count, runs, connecting)
    finally:
        primary.close()
        shutil.rmtree(counted, ignore_errors=True)
    S.clear_jobs()


def workers(res: Any, S: ModuleType, primary: Primary, counted: Path, count: int, runs: int, concurrency: int,
            connecting: int, *, idle: bool, idle_seconds: float) -> None:
    """One worker of ``concurrency`` children, its statements counted, drains ``count`` jobs
    ``runs`` times; and, if ``idle``, what it asks of the primary while nothing is due."""
    counted.mkdir()
    worker = S.WorkerRun(concurrency, env={"BENCH_STATEMENTS_DIR": str(counted)})
    try:
        worker.wait_ready()
        for _run in range(runs):
            S.clear_jobs()
            S.vacuum("prescient_futurejob", "prescient_jobhistory")
            a = mark(primary, counted)
            reader = primary.follow(a.lsn)
            with transaction.atomic():
                S.add_jobs(1, count, timezone.now() - timedelta(hours=1))
                S.notify()
            inserted, _ = primary.lsn()
            started, polls, most = time.perf_counter(), 0, 0
            while True:
                busy, connections = S.q(
                    "SELECT EXISTS(SELECT 1 FROM prescient_futurejob WHERE reserved_by <> '' OR (state = 'scheduled' "
                    "AND next_check_at <= now())), (SELECT count(*) FROM pg_stat_activity WHERE datname = "
                    "current_database() AND pid <> pg_backend_pid())")[0]
                polls, most = polls + 1, max(most, connections)
                if not busy:
                    break
                time.sleep(0.02)
            seconds = time.perf_counter() - started
            b = mark(primary, counted)
            insert_wal = reader.until(inserted) if reader is not None else None
            done = window(a, b, connecting + 1 + polls, reader)
            if reader is not None and done.wal is not None:
                # the drain's own, from the insert's commit on (None: the insert's could not be read)
                done.wal = None if insert_wal is None else done.wal - insert_wal
            per = 1000 / count
            res.add(f"load.rate.{concurrency}", count / seconds)
            res.add(f"load.statements.{concurrency}", done.statements * per)
            res.add(f"load.transactions.{concurrency}", done.transactions * per)
            if done.wal is not None:
                res.add(f"load.wal.{concurrency}", done.wal * per / 2**20)
            res.add(f"load.wal_cluster.{concurrency}", done.cluster_wal * per / 2**20)
            res.add(f"load.connections.{concurrency}", most)
            if insert_wal is not None:
                res.add("load.wal.bulk", insert_wal * per / 2**20)
            S.log(f"load: {count:,} jobs, one worker of {concurrency} child(ren): {count / seconds:,.0f}/s; per 1,000 "
                  f"jobs {done.statements * per:,.1f} statements, {done.transactions * per:,.1f} transactions, "
                  f"{(done.wal or 0) * per / 2**20:,.2f} MB of this database's WAL (the cluster's: "
                  f"{done.cluster_wal * per / 2**20:,.1f} MB); {most} connections at most")
        if idle:
            S.clear_jobs()
            a = mark(primary, counted)
            time.sleep(idle_seconds)
            b = mark(primary, counted)
            quiet = window(a, b, 0, None)  # the bench process is not connected meanwhile
            res.add("load.idle.statements", quiet.statements * 60 / idle_seconds)
            res.add("load.idle.transactions", quiet.transactions * 60 / idle_seconds)
            S.log(f"load: one idle worker of {concurrency} child(ren), per minute: "
                  f"{quiet.statements * 60 / idle_seconds:,.0f} statements, "
                  f"{quiet.transactions * 60 / idle_seconds:,.0f} transactions")
    finally:
        worker.stop()


def inserts(res: Any, S: ModuleType, primary: Primary, count: int, runs: int, connecting: int) -> None:
    """``schedule()`` one by one, in autocommit: each job's insert on its own."""
    from bench.models import Item

    items = list(Item.objects.filter(pk__lte=count).order_by("pk"))
    for _run in range(runs):
        S.clear_jobs()
        S.vacuum("prescient_futurejob")
        a = mark(primary, None)
        reader = primary.follow(a.lsn)
        for item in items:
            S.prescient.schedule(item, S.NOOP, delay=timedelta(hours=1))
        b = mark(primary, None)
        done = window(a, b, connecting, reader)
        if done.wal is not None:
            res.add("load.wal.schedule", done.wal * 1000 / count / 2**20)
        res.add("load.transactions.schedule", done.transactions * 1000 / count)
    S.log(f"load: schedule() one by one, per 1,000: "
          f"{statistics.median(res.values.get('load.wal.schedule', [0])):,.2f} MB of WAL, "
          f"{statistics.median(res.values['load.transactions.schedule']):,.0f} transactions")


def ticks(res: Any, S: ModuleType, primary: Primary, counted: Path, count: int, runs: int, connecting: int) -> None:
    """One in-process tick over the same jobs (every thread's statements counted: its guard's too)."""
    counted.mkdir()
    counting.install(str(counted))  # from here on, this process counts its statements
    for _run in range(runs):
        S.clear_jobs()
        now = timezone.now()
        S.add_jobs(1, count, now - timedelta(hours=1))
        S.vacuum("prescient_futurejob", "prescient_jobhistory")
        a = mark(primary, counted)
        reader = primary.follow(a.lsn)
        summary = S.tick(now)
        assert summary.processed == count, summary.line()
        b = mark(primary, counted)
        done = window(a, b, connecting, reader)
        per = 1000 / count
        res.add("load.statements.tick", done.statements * per)
        res.add("load.transactions.tick", done.transactions * per)
        if done.wal is not None:
            res.add("load.wal.tick", done.wal * per / 2**20)
    S.log(f"load: one tick, per 1,000 jobs: {statistics.median(res.values['load.statements.tick']):,.1f} statements, "
          f"{statistics.median(res.values['load.transactions.tick']):,.1f} transactions, "
          f"{statistics.median(res.values.get('load.wal.tick', [0])):,.2f} MB of WAL")
