"""How fast the admin console answers with a million live jobs, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/prescient python bench/admin_bench.py

Creates a scratch database next to the one in ``DATABASE_URL`` (``<name>_admin_bench``),
migrates it, inserts 1,000,000 future jobs and 200,000 history rows with ``generate_series``,
then requests the job list (plain and filtered), the dashboard, the workflows and the history
through Django's test ``Client``, logged in as a superuser, and prints the time and the number
of queries of each page. The scratch database is dropped at the end (``--keep`` keeps it).
The target: each page under one second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Pages timed, with the label printed for each.
PAGES = [
    ("job list", "/admin/prescient/futurejob/"),
    ("job list, overdue", "/admin/prescient/futurejob/?due=overdue"),
    ("job list, scheduled, one check", "/admin/prescient/futurejob/?state__exact=scheduled&job_exec=test.record"),
    ("job list, search by key", "/admin/prescient/futurejob/?q=123456"),
    ("dashboard", "/admin/prescient/futurejob/dashboard/"),
    ("workflows", "/admin/prescient/workflow/"),
    ("job history", "/admin/prescient/jobhistory/"),
]
LIMIT_SECONDS = 1.0


def scratch_url(url: str) -> tuple[str, str, str]:
    """``(scratch database URL, its name, URL of the server's maintenance database)``."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit(f"DATABASE_URL must be a PostgreSQL URL, got {url!r}")
    name = (parts.path.lstrip("/") or "prescient") + "_admin_bench"
    return (
        urlunsplit(parts._replace(path="/" + name)),
        name,
        urlunsplit(parts._replace(path="/postgres")),
    )


def recreate(maintenance_url: str, name: str, *, drop_only: bool = False) -> None:
    import psycopg

    with psycopg.connect(maintenance_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{name}"')


def column_values(model: Any, overrides: dict[str, str]) -> tuple[list[str], list[str], list[Any]]:
    """Columns, SQL expressions and parameters for an INSERT … SELECT of ``model``.

    The columns named in ``overrides`` get those expressions (of ``i``, the series); every
    other column its field's default, so that fields added later need no change here.
    """
    from django.db import connection

    columns, expressions, params = [], [], []
    for model_field in model._meta.concrete_fields:
        if model_field.primary_key:
            continue
        columns.append(connection.ops.quote_name(model_field.column))
        if model_field.column in overrides:
            expressions.append(overrides[model_field.column].replace("%", "%%"))  # modulo, not a parameter
            continue
        if not model_field.has_default() and not model_field.null:
            raise SystemExit(f"{model.__name__}.{model_field.name} needs a value in the bench")
        expressions.append("%s")
        params.append(model_field.get_db_prep_save(model_field.get_default(), connection))
    return columns, expressions, params


def insert_series(model: Any, count: int, overrides: dict[str, str]) -> float:
    from django.db import connection

    columns, expressions, params = column_values(model, overrides)
    sql = (
        f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({', '.join(columns)}) "
        f"SELECT {', '.join(expressions)} FROM generate_series(1, %s) AS s(i)"
    )
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, count])
    return time.perf_counter() - started


def populate(jobs: int, history: int) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from prescient.models import FutureJob, JobHistory, Worker, Workflow

    checks = "(ARRAY['test.record', 'test.slow', 'test.spin', 'test.exit'])[1 + i % 4]"
    workflow = "(ARRAY['', 'nightly', 'onboarding', 'billing', ''])[1 + i % 5]"
    # From 2 days ago to 28 days ahead, spread by a multiplicative hash so that neighbouring
    # ids are not neighbouring times.
    due = "now() - interval '2 days' + ((i::bigint * 7919) % 2592000) * interval '1 second'"
    state = (
        "CASE WHEN i % 100 = 0 THEN 'paused' WHEN i % 1000 = 1 THEN 'buried' "
        "WHEN i % 5000 = 2 THEN 'running' ELSE 'scheduled' END"
    )
    seconds = insert_series(
        FutureJob,
        jobs,
        {
            "entity_name": "'testapp.thing'",
            "entity_key": "i::text",
            "job_exec": checks,
            "workflow": workflow,
            "state": state,
            "last_state": "CASE WHEN i % 100 = 0 THEN 'scheduled' ELSE '' END",
            "first_check_at": due,
            "next_check_at": due,
            "check_count": "i % 5",
            "run_count": "i % 3",
            "failure_count": "CASE WHEN i % 1000 = 1 THEN 3 ELSE 0 END",
            "reserved_at": "CASE WHEN i % 5000 = 2 THEN now() ELSE NULL END",
            "reserved_by": "CASE WHEN i % 5000 = 2 THEN 'bench:1:abc' ELSE '' END",
            "created_at": f"{due} - interval '3 hours'",
        },
    )
    print(f"inserted {jobs:,} future jobs in {seconds:.1f} s")
    outcomes = (
        "(ARRAY['completed', 'completed', 'completed', 'completed', 'max_checks', 'failed', 'killed', "
        "'cancelled'])[1 + i % 8]"
    )
    finished = "now() - ((i::bigint * 7919) % 604800) * interval '1 second'"
    seconds = insert_series(
        JobHistory,
        history,
        {
            "job_id": f"{jobs} + i",
            "entity_name": "'testapp.thing'",
            "entity_key": "i::text",
            "job_exec": checks,
            "workflow": workflow,
            "outcome": outcomes,
            "check_count": "i % 5",
            "run_count": "1 + i % 3",
            "total_run_seconds": "(i % 17) * 0.13",
            "first_check_at": f"{finished} - interval '3 hours'",
            "created_at": f"{finished} - interval '4 hours'",
            "finished_at": finished,
        },
    )
    print(f"inserted {history:,} history rows in {seconds:.1f} s")
    for name in ("nightly", "onboarding", "billing"):
        Workflow.objects.get_or_create(name=name)
    now = timezone.now()
    Worker.objects.create(
        name="bench:1:abc", hostname="bench", pid=1, concurrency=4, started_at=now, heartbeat_at=now, jobs_done=0
    )
    User.objects.create_superuser("bench", "bench@example.com", "bench")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"VACUUM ANALYZE in {time.perf_counter() - started:.1f} s")


def time_pages(repeat: int) -> list[dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(User.objects.get(username="bench"))
    results = []
    for label, url in PAGES:
        response = client.get(url)  # warm-up: caches, the planner, the first connection
        if response.status_code != 200:
            raise SystemExit(f"{url}: HTTP {response.status_code}")
        times = []
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                client.get(url)
                times.append(time.perf_counter() - started)
        slowest_query = max((float(q["time"]) for q in queries.captured_queries), default=0.0)
        results.append(
            {
                "page": label,
                "url": url,
                "median_s": statistics.median(times),
                "max_s": max(times),
                "queries": len(queries.captured_queries),
                "slowest_query_s": slowest_query,
            }
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="future jobs to insert (default 1,000,000)")
    parser.add_argument("--history", type=int, default=200_000, help="history rows to insert (default 200,000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed requests per page (default 5)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()

    url = os.environ.get("DATABASE_URL", "")
    if not url:
        raise SystemExit("Set DATABASE_URL to a PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/prescient")
    bench_url, name, maintenance = scratch_url(url)
    recreate(maintenance, name)
    os.environ["DATABASE_URL"] = bench_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        print(f"scratch database {name}, Django {django.get_version()}")
        populate(args.jobs, args.history)
        results = time_pages(args.repeat)
        from django.db import connections

        connections.close_all()
    finally:
        if not args.keep:
            recreate(maintenance, name, drop_only=True)

    width = max(len(r["page"]) for r in results)
    print(f"\n{'page':<{width}}  median    max  queries  slowest query")
    slow = []
    for r in results:
        print(
            f"{r['page']:<{width}}  {r['median_s']:5.3f}s {r['max_s']:5.3f}s  {r['queries']:7d}  "
            f"{r['slowest_query_s']:.3f}s"
        )
        if r["max_s"] >= LIMIT_SECONDS:
            slow.append(r["page"])
    if slow:
        print(f"\nslower than {LIMIT_SECONDS:.0f} s: {', '.join(slow)}")
        return 1
    print(f"\nevery page under {LIMIT_SECONDS:.0f} s with {args.jobs:,} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
