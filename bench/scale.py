"""Past one machine (#36): the live table grown to millions of pending jobs, a slot's worth of
due jobs drained by one and by four workers, and the console's lists at that size. PostgreSQL
only; the default sizes are small, the issue's are given with ``--set`` (docs/performance.md):

    python -m bench --only scale --set scale_pending=1000000,10000000 \\
        --set scale_due=10000,100000,1000000 --set scale_history=10000000

In one run, for each size of ``scale_pending`` (ascending, the table grown from one to the next):

- the idle look (the idle tick's due query), the claim with nothing due, and one tick over
  ``scale_tick_due`` due jobs (per job); the live table's and its indexes' size per million.

Then, at the largest size:

- ``scale_due`` jobs made due at once (one statement, one NOTIFY), drained by 1 and by 4 idle
  workers of one child each (``scale_workers``): jobs per second, so that the cost per job from
  the smallest to the largest herd and the share of four workers are rows of the same run;
- ``scale_history`` history rows added, and the pages timed in-process through Django's test
  client: the admin's job list (plain and overdue), its dashboard and history list, the API's
  ``GET jobs`` and ``GET history`` (each the median of a few requests after a warm-up).
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

#: Pending jobs are added this many at a time, each batch due on a day of its own (1..28 ahead).
CHUNK = 1_000_000
#: Timed requests per page, after one warm-up.
PAGE_REPEAT = 3
#: The pages timed: (key, path, through the API).
PAGES = [
    ("jobs", "/admin/prescient/futurejob/", False),
    ("jobs_overdue", "/admin/prescient/futurejob/?due=overdue", False),
    ("dashboard", "/admin/prescient/futurejob/dashboard/", False),
    ("history", "/admin/prescient/jobhistory/", False),
    # The search box: a bare key, matched as an entity key or a workflow name (one OR).
    ("jobs_search", "/admin/prescient/futurejob/?q=4242", False),
    ("history_search", "/admin/prescient/jobhistory/?q=4242", False),
    ("api_jobs", "/prescient/jobs?limit=100", True),
    ("api_history", "/prescient/history?limit=100", True),
]


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    pendings = sorted(sizes["scale_pending"])
    now = timezone.now()
    S.clear_jobs()
    loaded = 0
    for pending in pendings:
        loaded = grow(S, loaded, pending, now)
        look(res, sizes, S, pending)
    base_max = S.q("SELECT coalesce(max(id), 0) FROM prescient_futurejob")[0][0]
    for due in sorted(sizes["scale_due"]):
        for count in sizes["scale_workers"]:
            rate = drain(S, due, count, base_max)
            res.add(f"scale.drain.{count}.{due}", rate)
            S.log(f"scale: {due:,} due among {loaded:,} pending, {count} worker(s) of 1 child: {rate:,.0f}/s")
    history(S, sizes["scale_history"], now)
    pages(res, S, loaded, sizes["scale_history"])
    S.clear_jobs()


def grow(S: ModuleType, loaded: int, pending: int, now: datetime) -> int:
    """The live table from ``loaded`` to ``pending`` jobs, none due; vacuumed."""
    started = time.perf_counter()
    while loaded < pending:
        count = min(CHUNK, pending - loaded)
        S.add_jobs(S.BASE_KEY + loaded, count, now + timedelta(days=1 + (loaded // CHUNK) % 28), created=now)
        loaded += count
    S.vacuum("prescient_futurejob")
    S.log(f"scale: {pending:,} pending ({time.perf_counter() - started:.0f} s to load and vacuum)")
    return loaded


def look(res: Any, sizes: dict[str, Any], S: ModuleType, pending: int) -> None:
    """The idle probes and a tick over ``scale_tick_due`` due jobs, at ``pending``."""
    heap, indexes = S.q("SELECT pg_table_size('prescient_futurejob'), pg_indexes_size('prescient_futurejob')")[0]
    res.add(f"scale.table_mb.{pending}", heap / 2**20 / (pending / 1e6))
    res.add(f"scale.indexes_mb.{pending}", indexes / 2**20 / (pending / 1e6))
    runs, reps, due = min(sizes["runs"], 3), sizes["idle_reps"], sizes["scale_tick_due"]
    now = timezone.now()
    probes = {
        f"scale.idle_look.{pending}": lambda: S.engine_sweep.survey(now),
        f"scale.claim_idle.{pending}": lambda: S.store.claim(now, 100, "tick:bench:scale"),
    }
    for _run in range(runs):
        samples: dict[str, list[float]] = {key: [] for key in probes}
        for _ in range(reps):  # round robin: both see the same noise
            for key, probe in probes.items():
                started = time.perf_counter()
                probe()
                samples[key].append(time.perf_counter() - started)
        for key, values in samples.items():
            res.add(key, statistics.median(values))
    base_max = S.q("SELECT coalesce(max(id), 0) FROM prescient_futurejob")[0][0]
    S.ensure_items(due)
    S.analyze("bench_item")
    for _run in range(runs):
        now = timezone.now()
        S.add_jobs(1, due, now - timedelta(hours=1))
        S.analyze("prescient_futurejob")
        seconds, summary = S.timed(lambda: S.tick(now))  # noqa: B023 (called at once)
        assert summary.processed == due, summary.line()
        res.add(f"scale.tick_per_job.{pending}", seconds / due * 1e6)
        S.q("DELETE FROM prescient_futurejob WHERE id > %s", [base_max])
        S.q("TRUNCATE prescient_jobhistory")
        S.vacuum("prescient_futurejob")
    S.log(f"scale: at {pending:,} pending, idle look "
          f"{statistics.median(res.values[f'scale.idle_look.{pending}']) * 1e6:.0f} us, claim with none due "
          f"{statistics.median(res.values[f'scale.claim_idle.{pending}']) * 1e6:.0f} us, tick "
          f"{statistics.median(res.values[f'scale.tick_per_job.{pending}']):.1f} us/job; table "
          f"{heap / 2**20:,.0f} MB, indexes {indexes / 2**20:,.0f} MB")


def busy() -> bool:
    """Whether a job is due or claimed: two index probes, each from the end where a drain's
    live entries are (the newest claim, the last of the herd), not from the head where the jobs
    it ran left their dead entries: probed from the head, every poll walked them (over the
    four-worker drain of a million, 2.1 of the 188 CPU-seconds the workers had; now under 1).
    A ``state = 'running'`` test, as ``wait_swept``'s, would read the whole table at this size."""
    sql = (
        "SELECT (SELECT 1 FROM prescient_futurejob WHERE reserved_by <> '' "
        "ORDER BY reserved_at DESC LIMIT 1) IS NOT NULL "
        "OR (SELECT 1 FROM prescient_futurejob WHERE state = 'scheduled' AND next_check_at <= now() "
        "ORDER BY next_check_at DESC, id DESC LIMIT 1) IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return bool(cursor.fetchone()[0])


def poll_pause(elapsed: float) -> float:
    """Seconds between two looks at a drain ``elapsed`` seconds old: its end is known to 0.25%
    of its time (20 ms at first, a quarter second at most), and the poller's queries take no
    more of the CPUs the workers share than they must."""
    return min(0.25, max(0.02, elapsed / 400))


def drain(S: ModuleType, due: int, count: int, base_max: int) -> float:
    """``count`` idle workers (one child each), then ``due`` jobs made due at once; jobs per
    second until every one has run. The jobs it leaves (bench.noop re-checks half) are deleted."""
    S.ensure_items(due)
    S.analyze("bench_item")
    with S.workers(count):
        with transaction.atomic():
            S.add_jobs(1, due, timezone.now() - timedelta(minutes=15))
            S.notify()
        started = time.perf_counter()
        deadline = time.monotonic() + 3600
        while busy():
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not drain the herd in an hour")
            time.sleep(poll_pause(time.perf_counter() - started))
        ended = time.perf_counter()
    ran = S.q("SELECT count(*) FROM prescient_jobhistory")[0][0] + S.q(
        "SELECT count(*) FROM prescient_futurejob WHERE id > %s AND check_count = 1", [base_max])[0][0]
    if ran != due:
        raise RuntimeError(f"the workers ran {ran} of {due} jobs")
    S.q("DELETE FROM prescient_futurejob WHERE id > %s", [base_max])
    S.q("TRUNCATE prescient_jobhistory")
    S.vacuum("prescient_futurejob", "prescient_jobhistory")
    return due / (ended - started)


def history(S: ModuleType, rows: int, now: datetime) -> None:
    """``rows`` history rows, finished over the past week (outcomes and checks mixed), in the
    order they finished, as jobs append them: an hour's rows sit together, as they do in a real
    history (rows spread at random over the week put an hour's 60,000 rows of ten million on as
    many pages, and the dashboard's health read them all for its hour).

    Loaded a partition at a time: its rows into a table of their own with no index, then that
    table attached in the partition's place, which builds its indexes in one pass each (the
    rows inserted through the indexes came at 30,000 a second: an hour for a hundred million).
    The indexes are therefore freshly built, packed fuller than a history's grown one by one."""
    from prescient.engine.store import partitions
    from prescient.maintenance import history_partitions
    from prescient.models import JobHistory

    started = time.perf_counter()
    start = now - timedelta(days=7)
    columns, values, params = [], [], []
    finished = f"%s::timestamptz + (x * 604800.0 / {int(rows)}) * interval '1 second'"
    ours = {
        "id": "x", "job_id": "x", "entity_name": "'bench.item'", "entity_key": "CAST(x AS TEXT)",
        "job_exec": "(ARRAY['bench.noop', 'bench.stamp', 'bench.slow'])[1 + x %% 3]",
        "outcome": "(ARRAY['completed', 'completed', 'completed', 'max_checks', 'failed', 'killed'])[1 + x %% 6]",
        "run_count": "1 + x %% 3", "total_run_seconds": "(x %% 17) * 0.013",
        "first_check_at": finished, "created_at": finished, "finished_at": finished,
    }
    for field in JobHistory._meta.concrete_fields:
        columns.append(connection.ops.quote_name(field.column))
        if field.attname in ours:
            values.append(ours[field.attname])
            params.extend([start] * ours[field.attname].count("%s"))
        else:
            values.append("%s")
            params.append(field.get_db_prep_save(field.get_default(), connection))
    history_partitions.ensure_ahead(start)  # the week's months, each a partition
    table = "prescient_jobhistory"
    S.q("SET maintenance_work_mem = '1GB'")
    for partition in partitions.partitions():
        if partition.upper <= start or partition.lower > now:
            continue
        # The x whose finished_at falls in the partition: finished_at grows with x.
        span = (partition.upper - start).total_seconds()
        first = max(1, int((partition.lower - start).total_seconds() * rows / 604800) - 1)
        last = min(rows, int(span * rows / 604800) + 1)
        if first > last:
            continue
        S.q(f"CREATE TABLE bench_history_load (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING STORAGE)")
        bounds = [partition.lower, partition.upper]
        S.q("ALTER TABLE bench_history_load ADD CONSTRAINT bench_history_load_range CHECK "
            "(finished_at IS NOT NULL AND finished_at >= %s AND finished_at < %s)", bounds)
        done = first - 1
        while done < last:
            count = min(CHUNK, last - done)
            cte, cte_params = S.series(done + 1, done + count)
            S.q(f"{cte}INSERT INTO bench_history_load ({', '.join(columns)}) SELECT {', '.join(values)} FROM g "
                f"WHERE {finished} >= %s AND {finished} < %s",
                [*cte_params, *params, start, partition.lower, start, partition.upper])
            done += count
        S.q(f"ALTER TABLE {table} DETACH PARTITION {partition.name}")
        S.q(f"DROP TABLE {partition.name}")
        S.q(f"ALTER TABLE bench_history_load RENAME TO {partition.name}")
        S.q(f"ALTER TABLE {partition.name} RENAME CONSTRAINT bench_history_load_range TO {partition.name}_range")
        S.q(f"ALTER TABLE {table} ATTACH PARTITION {partition.name} FOR VALUES FROM (%s) TO (%s)", bounds)
    S.q(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
    S.vacuum(table)
    S.log(f"scale: {rows:,} history rows ({time.perf_counter() - started:.0f} s to load, index and vacuum)")


def pages(res: Any, S: ModuleType, pending: int, rows: int) -> None:
    """Each page of :data:`PAGES`: a warm-up, then the median of :data:`PAGE_REPEAT` requests."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from prescient.api import tokens

    user = get_user_model().objects.create_superuser("bench-scale", "bench@example.com", None)
    _token, secret = tokens.issue(user, "bench", all_checks=True, now=timezone.now())
    admin, api = Client(), Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    admin.force_login(user)
    try:
        for key, path, through_api in PAGES:
            client = api if through_api else admin
            response = client.get(path)
            if response.status_code != 200:
                raise RuntimeError(f"{path}: HTTP {response.status_code}")
            times = []
            for _ in range(PAGE_REPEAT):
                started = time.perf_counter()
                client.get(path)
                times.append(time.perf_counter() - started)
            res.add(f"scale.page.{key}", statistics.median(times))
            S.log(f"scale: {path} at {pending:,} pending and {rows:,} history rows: "
                  f"{statistics.median(times) * 1e3:.0f} ms")
    finally:
        user.delete()
