"""What ending expectations by a PostgreSQL trigger would cost ``QuerySet.update()`` (issue #26):
``python -m bench.update_trigger [--database-url URL]``.

An UPDATE of a host table, with and without an ``AFTER UPDATE`` trigger that ends the pending
job of each row that now meets the condition (its live row deleted, a history row inserted), on
tables shaped as prescient's, in a scratch database (``<name>_trigger``, dropped at the end).
The simplest such trigger: its condition is written in SQL by hand, and it leaves out what the
store does when a job ends (runs in flight, waiting jobs, wake-ups). Not part of ``make bench``:
it informed the choice written in docs/expectations.md (no trigger; the next rung finds it met).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

parser = argparse.ArgumentParser()
parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/prescient_bench")
ARGS = parser.parse_args()
BASE, _, NAME = ARGS.database_url.replace("postgres://", "postgresql://", 1).rpartition("/")
URL = f"{BASE}/postgres"
DB = f"{NAME}_trigger"
N = 20_000
with psycopg.connect(URL, autocommit=True) as admin:
    admin.execute(f'DROP DATABASE IF EXISTS "{DB}"')
    admin.execute(f'CREATE DATABASE "{DB}"')
conn = psycopg.connect(f"{BASE}/{DB}", autocommit=True)


def x(sql: str, params: Any = None) -> Any:
    return conn.execute(sql, params)



x("CREATE TABLE shop_order (id bigint PRIMARY KEY, status text NOT NULL)")
x("""CREATE TABLE job (id bigserial PRIMARY KEY, entity_name text, entity_key text, job_exec text, kind text,
     payload jsonb, UNIQUE (entity_name, entity_key, job_exec))""")
x("""CREATE TABLE history (id bigserial PRIMARY KEY, job_id bigint, entity_key text, job_exec text, outcome text,
     finished_at timestamptz, payload jsonb)""")
x("""CREATE FUNCTION end_met() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'shipped' AND OLD.status IS DISTINCT FROM NEW.status THEN
    WITH gone AS (DELETE FROM job WHERE entity_name = 'shop.order' AND entity_key = NEW.id::text
                  AND job_exec = 'shop.shipped' RETURNING id, entity_key, job_exec, payload)
    INSERT INTO history (job_id, entity_key, job_exec, outcome, finished_at, payload)
    SELECT id, entity_key, job_exec, 'met', now(), payload FROM gone;
  END IF;
  RETURN NULL;
END $$""")



def reset(with_jobs: bool) -> None:
    x("TRUNCATE shop_order, job, history")
    x("INSERT INTO shop_order SELECT g, 'placed' FROM generate_series(1, %s) g", [N])
    if with_jobs:
        x("INSERT INTO job (entity_name, entity_key, job_exec, kind, payload) SELECT 'shop.order', g::text, "
          "'shop.shipped', 'expectation', '{}' FROM generate_series(1, %s) g", [N])
    x("VACUUM ANALYZE shop_order")
    x("VACUUM ANALYZE job")


def measure(trigger: bool, with_jobs: bool, rows: str) -> float:
    x("DROP TRIGGER IF EXISTS t_end_met ON shop_order")
    if trigger:
        x("CREATE TRIGGER t_end_met AFTER UPDATE OF status ON shop_order FOR EACH ROW "
          "EXECUTE FUNCTION end_met()")
    times = []
    for _ in range(3):
        reset(with_jobs)
        t = time.perf_counter()
        if rows == "bulk":
            x("UPDATE shop_order SET status = 'shipped'")
        else:
            for i in range(1, 2001):
                x("UPDATE shop_order SET status = 'shipped' WHERE id = %s", [i])
        times.append(time.perf_counter() - t)
    return statistics.median(times)


for rows in ("bulk", "one"):
    base = measure(False, True, rows)
    trig = measure(True, True, rows)
    none = measure(True, False, rows)
    label = f"{N:,} rows in one UPDATE" if rows == "bulk" else "2,000 single-row UPDATEs"
    print(
        f"{label}: no trigger {base * 1000:.0f} ms; trigger, every row's job ended {trig * 1000:.0f} ms "
        f"({trig / base:.1f}x); trigger, no job pending {none * 1000:.0f} ms ({none / base:.1f}x)"
    )
conn.close()
with psycopg.connect(URL, autocommit=True) as admin:
    admin.execute(f'DROP DATABASE "{DB}"')
