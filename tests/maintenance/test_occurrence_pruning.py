"""The records of produced occurrences are kept 30 days: pruned by the hourly duty in a
long-lived process, and by every pass that produces occurrences (a tick from cron lives for
seconds and never reaches the hour)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import prescient
from prescient.clock import db_now
from prescient.maintenance.recurring import KEEP_OCCURRENCES, OccurrencePruner
from prescient.models import Occurrence, Schedule
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db

T = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)  # a Monday, on a slot boundary


def hourly_schedule() -> Schedule:
    thing = Thing.objects.create()
    return prescient.recurring("h", check="test.record", entity=thing, every=timedelta(hours=1), now=T)


def record(schedule: Schedule, produced_at: datetime) -> Occurrence:
    return Occurrence.objects.create(schedule=schedule, at=produced_at, outcome="ran", produced_at=produced_at)


def test_occurrence_pruner__deletes_only_records_older_than_30_days():
    schedule = hourly_schedule()
    expired = record(schedule, T - KEEP_OCCURRENCES - timedelta(seconds=1))
    on_the_line = record(schedule, T - KEEP_OCCURRENCES)
    recent = record(schedule, T - timedelta(days=1))
    assert OccurrencePruner().run_once(T) == 1
    left = set(Occurrence.objects.values_list("pk", flat=True))
    assert left == {on_the_line.pk, recent.pk} and expired.pk not in left


def test_a_tick_that_produces_occurrences__prunes_the_expired_records_in_the_same_pass():
    schedule = hourly_schedule()
    expired = record(schedule, T - KEEP_OCCURRENCES - timedelta(hours=1))
    recent = record(schedule, T - timedelta(days=2))
    summary = prescient.tick(T + timedelta(hours=1))  # a fresh process: the hourly duty is not due
    assert summary.processed == 1
    left = set(Occurrence.objects.values_list("pk", flat=True))
    assert recent.pk in left and expired.pk not in left
    assert Occurrence.objects.filter(at=T + timedelta(hours=1), outcome="ran").count() == 1


def test_an_idle_tick__prunes_nothing():
    schedule = hourly_schedule()
    expired = record(schedule, T - KEEP_OCCURRENCES - timedelta(hours=1))
    assert prescient.tick(T + timedelta(minutes=30)).processed == 0  # nothing due: no producing pass
    assert Occurrence.objects.filter(pk=expired.pk).exists()


def test_a_replay_with_a_future_now__cannot_prune_recent_records():
    schedule = hourly_schedule()
    yesterday = record(schedule, db_now() - timedelta(days=1))
    assert OccurrencePruner().run_once(db_now() + KEEP_OCCURRENCES * 3) == 0
    assert Occurrence.objects.filter(pk=yesterday.pk).exists()


def test_a_replayed_tick_with_a_future_now__prunes_no_recent_record():
    schedule = hourly_schedule()
    yesterday = record(schedule, db_now() - timedelta(days=1))
    prescient.tick(db_now() + KEEP_OCCURRENCES * 3)  # the schedule is due: a producing pass
    assert Occurrence.objects.filter(outcome="ran").count() == 2
    assert Occurrence.objects.filter(pk=yesterday.pk).exists()


def test_a_producing_pass__deletes_at_most_its_share_oldest_first(monkeypatch):
    from prescient.maintenance import recurring as duty

    monkeypatch.setattr(duty, "PRUNE_PER_PASS", 2)
    schedule = hourly_schedule()
    old = [record(schedule, T - KEEP_OCCURRENCES - timedelta(days=n)) for n in (3, 2, 1)]
    prescient.tick(T + timedelta(hours=1))
    left = set(Occurrence.objects.values_list("pk", flat=True))
    assert old[0].pk not in left and old[1].pk not in left and old[2].pk in left
