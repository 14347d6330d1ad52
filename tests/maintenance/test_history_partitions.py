"""The history's time partitions (prescient.maintenance.history_partitions, migration 0024):
made ahead, rows routed and moved out of the default, dropped whole once every rule expired.

The PostgreSQL tests start from a table with no range partition (each test's transaction takes
them away and gives them back at its rollback), so what they see does not hang on the day the
test database was migrated; time is the explicit ``now`` of each call."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from prescient import maintenance
from prescient.engine import store
from prescient.engine.store import partitions as parts
from prescient.engine.sweep import Survey
from prescient.maintenance import history_partitions as hp
from prescient.maintenance import history_pruner
from prescient.maintenance.history_partitions import HistoryPartitions, ensure_ahead, planned
from prescient.models import JobHistory
from tests.conftest import on_postgres

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def at(year, month, day=1, hour=0, minute=0):
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def history(outcome, finished_at, key="1"):
    return JobHistory.objects.create(
        job_id=1, entity_name="testapp.thing", entity_key=key, job_exec="test.record", outcome=outcome,
        first_check_at=finished_at, created_at=finished_at, finished_at=finished_at,
    )


def where(row):
    """The partition that holds ``row``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM prescient_jobhistory WHERE id = %s", [row.pk])
        return cursor.fetchone()[0]


def names():
    return [p.name for p in parts.partitions()]


@pytest.fixture
def bare(settings):
    """A partitioned history with its DEFAULT partition only; day partitions; a retention."""
    settings.PRESCIENT = {**settings.PRESCIENT, "HISTORY_PARTITION": "day",
                          "HISTORY_RETENTION_DAYS": {"completed": 7, "*": 30}}
    assert parts.partitioned()
    JobHistory.objects.all().delete()
    for partition in parts.partitions():
        assert parts.drop(partition.name)
    assert names() == []


# --- the plan: pure, every database -----------------------------------------------------------


def existing(*ranges):
    return [parts.Partition(hp.name_of(lo, hi), lo, hi) for lo, hi in ranges]


def test_planned__days_from_the_current_one_and_three_ahead():
    assert [name for name, _, _ in planned(NOW, "day", [])] == [
        "prescient_jobhistory_p20261129", "prescient_jobhistory_p20261130",
        "prescient_jobhistory_p20261201", "prescient_jobhistory_p20261202",
    ]


def test_planned__months_from_the_current_one_and_two_ahead_across_a_year():
    assert [(lo, hi) for _, lo, hi in planned(at(2026, 12, 31), "month", [])] == [
        (at(2026, 12), at(2027, 1)), (at(2027, 1), at(2027, 2)), (at(2027, 2), at(2027, 3)),
    ]
    assert hp.name_of(at(2026, 12), at(2027, 1)) == "prescient_jobhistory_p202612"


def test_planned__skips_what_exists_and_a_change_of_granularity_starts_at_the_last_bound():
    months = existing((at(2026, 11), at(2026, 12)))
    assert [(lo, hi) for _, lo, hi in planned(NOW, "day", months)] == [
        (at(2026, 12, 1), at(2026, 12, 2)), (at(2026, 12, 2), at(2026, 12, 3)),
    ]
    days = existing(*((NOW.replace(hour=0) + n * DAY, NOW.replace(hour=0) + (n + 1) * DAY) for n in range(4)))
    plan = planned(NOW, "month", days)
    assert [(lo, hi) for _, lo, hi in plan] == [
        (at(2026, 11), at(2026, 11, 29)), (at(2026, 12, 3), at(2027, 1)), (at(2027, 1), at(2027, 2)),
    ]
    assert [name for name, _, _ in plan][:2] == ["prescient_jobhistory_p20261101", "prescient_jobhistory_p20261203"]


@pytest.mark.skipif(on_postgres(), reason="SQLite only")
def test_on_sqlite__one_table_and_the_duty_does_nothing(settings, t0):
    settings.PRESCIENT = {**settings.PRESCIENT, "HISTORY_RETENTION_DAYS": {"*": 1}}
    assert not parts.partitioned()
    assert ensure_ahead(NOW) == 0
    assert not HistoryPartitions().is_due(Survey(due=False, stale=False))
    history("completed", NOW - 3 * DAY)
    done = history_pruner.prune(NOW)
    assert (done.total, done.dropped) == (1, {})


# --- PostgreSQL ----------------------------------------------------------------------------------


@pytest.mark.postgres
def test_ensure_ahead__makes_the_partitions_and_rows_land_in_theirs(bare):
    assert ensure_ahead(NOW) == 4
    assert ensure_ahead(NOW) == 0  # idempotent
    assert names()[0] == "prescient_jobhistory_p20261129" and len(names()) == 4
    assert where(history("completed", NOW)) == "prescient_jobhistory_p20261129"
    assert where(history("completed", at(2026, 12, 2, 23))) == "prescient_jobhistory_p20261202"
    assert where(history("completed", at(2026, 12, 3))) == parts.DEFAULT  # past every partition


@pytest.mark.postgres
def test_ensure_ahead__moves_rows_that_landed_in_the_default_into_their_new_partition(bare):
    early, late = history("completed", NOW), history("failed", NOW + 2 * DAY)
    elsewhere = history("completed", NOW + 30 * DAY)
    assert {where(early), where(late)} == {parts.DEFAULT}
    ensure_ahead(NOW)
    assert (where(early), where(late)) == ("prescient_jobhistory_p20261129", "prescient_jobhistory_p20261201")
    assert where(elsewhere) == parts.DEFAULT
    assert JobHistory.objects.count() == 3


@pytest.mark.postgres
def test_a_change_of_granularity__never_overlaps(bare, settings):
    ensure_ahead(NOW)  # days, to Dec 3
    settings.PRESCIENT = {**settings.PRESCIENT, "HISTORY_PARTITION": "month"}
    ensure_ahead(NOW)
    found = parts.partitions()
    assert all(a.upper <= b.lower for a, b in itertools.pairwise(found))
    assert [(p.lower, p.upper) for p in found] == [
        (at(2026, 11), at(2026, 11, 29)), *((NOW.replace(hour=0) + n * DAY, NOW.replace(hour=0) + (n + 1) * DAY)
                                            for n in range(4)),
        (at(2026, 12, 3), at(2027, 1)), (at(2027, 1), at(2027, 2)),
    ]


@pytest.mark.postgres
def test_the_pruner__drops_a_partition_once_every_outcome_in_it_expired(bare):
    ensure_ahead(NOW - 40 * DAY)  # Oct 20..23
    ensure_ahead(NOW)
    for n in range(3):
        history("completed", at(2026, 10, 20, n))
    history("failed", at(2026, 10, 21, 5))  # kept 30 days: until Nov 21 05:00
    history("completed", at(2026, 11, 29, 1))
    october = [f"prescient_jobhistory_p202610{day}" for day in (20, 21, 22, 23)]  # the last two empty
    dry = history_pruner.expired(NOW)
    assert (list(dry.dropped), dry.total) == (october, 4)
    assert len(names()) == 8  # a dry run drops nothing

    done = history_pruner.prune(NOW)
    assert done.dropped == dict(zip(october, (3, 1, 0, 0), strict=True))  # never analyzed: counted
    assert (sum(done.removed.values()), done.total) == (0, 4)
    assert names()[0] == "prescient_jobhistory_p20261129"  # empty too, but ahead of every cut-off
    assert JobHistory.objects.count() == 1


@pytest.mark.postgres
def test_a_partition_holding_a_longer_rule_is_pruned_by_delete_until_its_last_rule_expires(bare):
    ensure_ahead(at(2026, 11, 10))  # Nov 10..13
    history("completed", at(2026, 11, 10, 1))  # expires Nov 17 01:00
    history("failed", at(2026, 11, 10, 2))  # expires Dec 10 02:00
    done = history_pruner.prune(at(2026, 11, 20))
    assert (done.dropped, done.total) == ({}, 1)  # the completed row deleted, the partition kept
    assert list(JobHistory.objects.values_list("outcome", flat=True)) == ["failed"]
    assert "prescient_jobhistory_p20261110" in names()
    done = history_pruner.prune(at(2026, 12, 10, 1))  # failed rows expire before Nov 10 01:00: not this one
    assert (done.dropped, done.total) == ({}, 0)
    done = history_pruner.prune(at(2026, 12, 11))  # its last rule expired: dropped, its row with it
    assert (done.dropped, done.removed["failed"]) == ({"prescient_jobhistory_p20261110": 1}, 0)
    assert JobHistory.objects.count() == 0


@pytest.mark.postgres
def test_an_outcome_kept_forever_keeps_its_partition(bare, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "HISTORY_RETENTION_DAYS": {"completed": 7, "killed": None}}
    ensure_ahead(at(2025, 1, 1))
    history("completed", at(2025, 1, 1, 1))
    history("killed", at(2025, 1, 1, 2))
    done = history_pruner.prune(NOW)
    assert (done.total, done.removed["completed"]) == (1, 1)  # deleted, not dropped
    assert list(done.dropped) == [f"prescient_jobhistory_p2025010{day}" for day in (2, 3, 4)]  # empty
    assert "prescient_jobhistory_p20250101" in names()
    assert list(JobHistory.objects.values_list("outcome", flat=True)) == ["killed"]


@pytest.mark.postgres
def test_the_default_partition_is_never_dropped(bare):
    history("completed", at(2020, 1, 1))
    done = history_pruner.prune(NOW)
    assert (done.dropped, done.total) == ({}, 1)  # deleted row by row
    with pytest.raises(ValueError, match="never dropped"):
        parts.drop(parts.DEFAULT)


@pytest.mark.postgres
def test_a_partition_detached_by_a_pass_that_died__is_dropped_by_the_next(bare):
    ensure_ahead(at(2026, 10, 1))
    history("completed", at(2026, 10, 1, 1))
    kept = history("completed", at(2026, 11, 29, 1))
    october = "prescient_jobhistory_p20261001"
    # The drop's first transaction only: the rows leave the history, the table stays.
    assert parts.detach(october)
    assert list(JobHistory.objects.values_list("pk", flat=True)) == [kept.pk]
    assert october not in names()
    assert parts.leftovers() == [october]
    done = history_pruner.prune(NOW)
    assert parts.leftovers() == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [october])
        assert cursor.fetchone()[0] is None
    assert list(JobHistory.objects.values_list("pk", flat=True)) == [kept.pk]
    assert done.total == 0  # its rows had left the history with the detach


@pytest.mark.postgres
def test_a_dropped_partition__leaves_no_table_behind(bare):
    ensure_ahead(at(2026, 10, 1))
    history("completed", at(2026, 10, 1, 1))
    done = history_pruner.prune(NOW)
    assert "prescient_jobhistory_p20261001" in done.dropped
    assert parts.leftovers() == []


@pytest.mark.postgres
def test_a_busy_partition__is_left_for_the_next_pass(bare, monkeypatch):
    ensure_ahead(at(2026, 10, 1))
    history("completed", at(2026, 10, 1, 1))
    history("completed", at(2026, 10, 5, 1))  # in the default: would be deleted by a batch
    monkeypatch.setattr(parts, "detach", lambda name: False)  # the parent's lock not granted in time
    done = history_pruner.prune(NOW)
    assert (done.dropped, done.total, done.complete) == ({}, 0, False)
    assert JobHistory.objects.count() == 2


@pytest.mark.postgres
def test_with_history_kept_forever__the_duty_is_not_due(bare, settings):
    """Nothing to drop, nothing to make: an idle tick stays one query (tests/runtime/test_tick.py)."""
    duty = {service.name: service for service in maintenance.registered_services()}["history_partitions"]
    for kept in (None, {"completed": None}, {}):
        settings.PRESCIENT = {**settings.PRESCIENT, "HISTORY_RETENTION_DAYS": kept}
        assert not duty.is_due(Survey(due=False, stale=False))
    settings.PRESCIENT = {**settings.PRESCIENT, "HISTORY_RETENTION_DAYS": {"failed": 3}}
    assert duty.is_due(Survey(due=False, stale=False))


@pytest.mark.postgres
def test_the_duty__is_registered_and_makes_the_partitions(bare):
    duty = {service.name: service for service in maintenance.registered_services()}["history_partitions"]
    assert duty.is_due(Survey(due=False, stale=False))
    assert duty.run_once(NOW) == 4


@pytest.mark.postgres
def test_the_migration__converts_a_table_with_rows_and_back_keeping_ids(transactional_db):
    from django.db.migrations.executor import MigrationExecutor

    first = history("completed", at(2025, 6, 1)).pk
    last = history("failed", NOW).pk
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("prescient", "0023_rerun_links")])
        assert not parts.partitioned()
        assert sorted(JobHistory.objects.values_list("pk", flat=True)) == [first, last]
        assert history("killed", NOW).pk == last + 1  # the sequence went on
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("prescient"))
    assert parts.partitioned()
    assert sorted(JobHistory.objects.values_list("pk", flat=True)) == [first, last, last + 1]
    assert names()[0] == "prescient_jobhistory_p202506"  # from the oldest row's month
    assert history("met", NOW).pk == last + 2
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "prescient_jobhistory")
    assert constraints["prescient_hist_outcome"]["columns"] == ["outcome", "finished_at"]
    assert constraints["prescient_jobhistory_pkey"]["columns"] == ["id", "finished_at"]
    JobHistory.objects.all().delete()
    for partition in parts.partitions():  # the test database's own, from the day it was migrated
        if partition.upper <= at(2026, 11):
            parts.drop(partition.name)


@pytest.mark.postgres
def test_two_pruners_at_once__neither_fails(transactional_db, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "HISTORY_PARTITION": "day", "HISTORY_RETENTION_DAYS": {"*": 7}}
    ensure_ahead(at(2026, 10, 1))
    for day in (1, 2, 3):
        history("completed", at(2026, 10, day, 1))
    errors, barrier = [], threading.Barrier(2)

    def prune():
        try:
            barrier.wait(5)
            history_pruner.prune_all(NOW)
            for service in (history_pruner.HistoryPruner(), HistoryPartitions()):
                with store.exclusive(maintenance.lock_name(service.name)) as mine:
                    if mine:
                        service.run_once(NOW)
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=prune) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert JobHistory.objects.count() == 0
    assert not any(at(2026, 10, 1) <= p.lower < at(2026, 10, 5) for p in parts.partitions())


@pytest.mark.postgres
def test_the_pruner__detaches_under_its_lock_and_drops_the_tables_after_its_commit(transactional_db, bare, monkeypatch):
    """The partitions' step of a locked prune (the duty, prescient_prune) is one transaction that
    holds the pruner's transaction-level lock while it finds and detaches; the detached tables are
    dropped after its commit, outside the lock and any transaction (no lock of the history table
    held while their files go)."""
    ensure_ahead(at(2026, 10, 1))
    history("completed", at(2026, 10, 1, 1))
    key1, key2 = store._lock_key(maintenance.lock_name("history_pruner"))
    seen = []

    def locked() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                "AND classid = %s AND objid = %s AND objsubid = 2", [key1, key2 & 0xFFFFFFFF],
            )
            return bool(cursor.fetchone()[0])

    def spy(step, real):
        def call(name):
            seen.append((step, connection.in_atomic_block, locked()))
            return real(name)
        return call

    monkeypatch.setattr(parts, "detach", spy("detach", parts.detach))
    monkeypatch.setattr(parts, "discard", spy("discard", parts.discard))
    done = history_pruner.prune(NOW, lock=maintenance.lock_name("history_pruner"))
    assert "prescient_jobhistory_p20261001" in done.dropped and JobHistory.objects.count() == 0
    assert {s for s in seen if s[0] == "detach"} == {("detach", True, True)}
    assert {s for s in seen if s[0] == "discard"} == {("discard", False, False)}
    assert not locked()
