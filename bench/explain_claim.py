"""The claim's plan at 1,000,000 pending jobs (PostgreSQL): ``python -m bench.explain_claim``.

Makes a scratch database (``prescient_explain`` beside the bench's, dropped afterwards), migrates
it, fills the live table with 1,000,000 scheduled jobs due later (priority 0) and 1,000 due now
over three priorities, ``ANALYZE``s it, and prints ``EXPLAIN (ANALYZE, BUFFERS)`` of one claim of
100, taken exactly as a worker's child takes it (the statement of
``prescient.engine.store.claims``), in a transaction rolled back. docs/performance.md shows one
output ("The claim's plan").
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime


def main() -> int:
    base = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/prescient_bench")
    url = base.rsplit("/", 1)[0] + "/prescient_explain"
    os.environ["BENCH_DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import psycopg

    maintenance = base.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute('DROP DATABASE IF EXISTS "prescient_explain" WITH (FORCE)')
        conn.execute('CREATE DATABASE "prescient_explain"')
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection, transaction

        from prescient.engine.store import claims
        from prescient.models import FutureJob

        call_command("migrate", verbosity=0)
        table = FutureJob._meta.db_table
        now = datetime.now(UTC)
        FutureJob.objects.create(
            entity_name="bench.item", entity_key="0", job_exec="later", first_check_at=now, next_check_at=now,
            created_at=now,
        )
        # A million copies of that one row, each its own entity; the first 1,000 due an hour ago
        # over three priorities, the rest due later, one a second.
        overrides = {
            "entity_key": "g::text",
            "job_exec": "CASE WHEN g <= 1000 THEN 'due' ELSE 'later' END",
            "next_check_at": "now() + CASE WHEN g <= 1000 THEN interval '-1 hour' ELSE (g || ' seconds')::interval END",
            "priority": "CASE WHEN g <= 1000 THEN g % 3 * 5 ELSE 0 END",
        }
        columns = [f.column for f in FutureJob._meta.concrete_fields if not f.primary_key]
        values = [overrides.get(column, f'"{column}"') for column in columns]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in columns)}) "
                f"SELECT {', '.join(values)} FROM {table}, generate_series(1, 1000000) g"
            )
            cursor.execute(f"DELETE FROM {table} WHERE entity_key = '0'")
            cursor.execute(f"ANALYZE {table}")
        ctes, pick, params = claims._pick(now, 100, None)
        sql = f"WITH RECURSIVE {ctes}picked (pk) AS MATERIALIZED ({pick}) SELECT count(*) FROM picked"
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", params)
                plan = [row[0] for row in cursor.fetchall()]
            transaction.set_rollback(True)
        print("EXPLAIN (ANALYZE, BUFFERS) of one claim of 100: 1,000,000 pending, 1,000 due over 3 priorities")
        print("\n".join(plan))
        connection.close()
    finally:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "prescient_explain" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
