"""Two ticks at once over 200 schedules: each occurrence runs once (PostgreSQL, real processes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import prescient
from prescient.models import Occurrence, Schedule
from tests.conftest import manage
from tests.testapp.models import RunLog, Thing

T = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_ticks_at_once__each_occurrence_runs_once():
    things = [Thing.objects.create() for _ in range(200)]
    for thing in things:
        prescient.recurring(f"c{thing.pk}", check="test.record", entity=thing, every=timedelta(hours=1), now=T)
    at = (T + timedelta(hours=1)).isoformat()
    ticks = [manage("prescient_tick", "--now", at) for _ in range(2)]
    for tick in ticks:
        _, err = tick.communicate(timeout=120)
        assert tick.returncode == 0, err
    # Counted outside the job table: by the check's own log, and by the occurrence rows.
    assert RunLog.objects.filter(check_name="test.record").count() == 200
    assert RunLog.objects.values("entity_key").distinct().count() == 200
    assert Occurrence.objects.count() == 200
    assert sum(Schedule.objects.values_list("runs", flat=True)) == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_producers_at_once_without_the_upkeep_lock__each_occurrence_once():
    """The guard is the database's, not the advisory lock: two threads call produce() itself."""
    import threading

    from django.db import connection

    from prescient.engine import recurring

    things = [Thing.objects.create() for _ in range(200)]
    for thing in things:
        prescient.recurring(f"c{thing.pk}", check="test.record", entity=thing, every=timedelta(hours=1), now=T)
    barrier = threading.Barrier(2)
    done: list[int] = []

    def produce() -> None:
        try:
            barrier.wait()
            done.append(recurring.produce(T + timedelta(hours=1), batch_size=20).runs)
        finally:
            connection.close()

    threads = [threading.Thread(target=produce) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(done) == 200
    assert Occurrence.objects.count() == 200
    assert prescient.tick(T + timedelta(hours=1)).processed == 200
    assert RunLog.objects.filter(check_name="test.record").count() == 200
