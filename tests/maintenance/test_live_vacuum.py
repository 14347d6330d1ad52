"""The live table's vacuum (prescient.maintenance.live_vacuum): a large drain's dead rows cleared."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from prescient import maintenance
from prescient.engine.sweep import Survey
from prescient.maintenance import live_vacuum
from prescient.maintenance.live_vacuum import LiveTableVacuum, dead_and_live, worth_vacuuming
from prescient.models import FutureJob
from tests.conftest import on_postgres

IDLE = Survey(due=False, stale=False)


def service() -> LiveTableVacuum:
    found = next(s for s in maintenance.registered_services() if s.name == LiveTableVacuum.name)
    assert isinstance(found, LiveTableVacuum)
    return found


def test_a_vacuum__pays_only_after_a_large_drain():
    assert not worth_vacuuming(live_vacuum.MIN_DEAD_ROWS - 1, 0)  # few dead rows: autovacuum's
    assert worth_vacuuming(live_vacuum.MIN_DEAD_ROWS, 0)  # a drain: the table is all dead rows
    assert worth_vacuuming(50_000, 150_000)
    assert not worth_vacuuming(50_000, 1_000_000)  # a big table that churns a little: autovacuum's


def test_a_long_drain_in_a_large_table__is_vacuumed_while_it_goes_on():
    # A million due among ten million: a fifth of the table dead comes after two million jobs,
    # while the claims walk every dead entry at the head of the claim index (bench scale).
    assert not worth_vacuuming(150_000, 10_000_000)
    assert worth_vacuuming(200_000, 10_000_000)
    assert worth_vacuuming(620_000, 100_000_000)
    assert not worth_vacuuming(500_000, 100_000_000)
    # The square root, not a fraction: a tenfold table waits for about three times the dead rows.
    assert worth_vacuuming(70_000, 1_000_000)
    assert not worth_vacuuming(70_000, 10_000_000)


def test_the_duty__is_built_in_and_not_due_at_a_process_start(db, t0):
    duty = service()
    assert duty.own_transactions  # VACUUM cannot run in a transaction
    assert not duty.is_due(IDLE)  # an idle tick stays one query
    assert LiveTableVacuum.name not in maintenance.run_due(t0, survey=IDLE)


@pytest.mark.skipif(on_postgres(), reason="SQLite only")
def test_on_sqlite__the_duty_is_never_due(db):
    duty = service()
    duty.last_run = time.monotonic() - 10 * duty.interval
    assert not duty.is_due(IDLE)


def make_dead_rows(make_job, count: int) -> None:
    FutureJob.objects.filter(pk__in=[make_job().pk for _ in range(count)]).delete()
    with connection.cursor() as cursor:  # the statistics as PostgreSQL keeps them, now
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")


@pytest.mark.postgres
def test_after_a_drain__the_next_pass_vacuums_the_live_table(transactional_db, make_job, monkeypatch, t0):
    monkeypatch.setattr(live_vacuum, "MIN_DEAD_ROWS", 5)
    make_dead_rows(make_job, 8)
    dead, _ = dead_and_live()
    assert dead >= 8
    duty = service()
    duty.last_run = time.monotonic() - duty.interval  # its interval has passed
    done = maintenance.run_due(t0, survey=IDLE)
    assert done[LiveTableVacuum.name] == dead
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relname = %s", [FutureJob._meta.db_table]
        )
        dead_after, vacuums = cursor.fetchone()
    assert dead_after == 0
    assert vacuums >= 1


@pytest.mark.postgres
def test_a_few_dead_rows__are_left_to_autovacuum(transactional_db, make_job, t0):
    make_dead_rows(make_job, 3)
    duty = service()
    duty.last_run = time.monotonic() - duty.interval
    assert maintenance.run_due(t0, survey=IDLE)[LiveTableVacuum.name] == 0  # one look at the statistics
