"""The SLA view of expectations (#34 item 9, :mod:`prescient.sla`): per day, met within each rung,
missed and other endings; time to met p50/p95. The history rows are real: started with
``expect()``, climbed by ticks and met by ``recheck()`` or at a rung, all at explicit times."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

import prescient
from prescient import sla as sla_module
from prescient.models import FutureJob, JobHistory
from prescient.sla import percentile, sla
from tests.conftest import T0
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)
M = timedelta(minutes=1)
LADDER = [H, 2 * H, 3 * H]
#: After the fixture's last tick: the SLA is read as of then.
NOW = T0 + 4 * H


def ship(thing: Thing, at) -> None:
    """Ship ``thing`` as another service would (an UPDATE, not a save) and recheck it at ``at``."""
    Thing.objects.filter(pk=thing.pk).update(status="shipped")
    if at is not None:
        assert prescient.recheck([thing], now=at) == 1


def started(name: str, at) -> Thing:
    thing = Thing.objects.create(name=name)
    assert prescient.expect(thing, "test.expect", now=at) is not None
    return thing


@pytest.fixture
def week(declare):
    """On 2026-11-22 (UTC): met in rung 1 (30 min), in rung 2 (90 min), in rung 3 (3 h, found met
    by the rung), missed, killed; and the day before, met in rung 1 (15 min)."""
    declare(ladder=LADDER)
    yesterday = started("yesterday", T0 - 24 * H)
    ship(yesterday, T0 - 24 * H + 15 * M)
    first, second, third, missed, killed = (started(name, T0) for name in ("1", "2", "3", "missed", "killed"))
    prescient.kill(FutureJob.objects.get(entity_key=str(killed.pk)), "customer left", now=T0 + 10 * M)
    ship(first, T0 + 30 * M)
    prescient.tick(T0 + H)
    ship(second, T0 + 90 * M)
    prescient.tick(T0 + 2 * H)
    ship(third, None)  # no recheck: the third rung finds it met
    prescient.tick(T0 + 3 * H)
    assert not FutureJob.objects.exists()
    return {"first": first, "second": second, "third": third, "missed": missed}


def test_percentile__nearest_rank():
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0  # rank ceil(2.0) = 2
    assert percentile([4.0, 1.0, 3.0, 2.0], 95) == 4.0  # rank ceil(3.8) = 4
    assert percentile([float(n) for n in range(1, 21)], 95) == 19.0  # rank 19 exactly, no float rounding up
    assert percentile([float(n) for n in range(1, 101)], 50) == 50.0


def test_the_history_rows_are_what_the_sla_reads(week):
    steps = {
        row.entity_key: (row.outcome, row.payload.get("step"))
        for row in JobHistory.objects.filter(job_exec="test.expect")
    }
    assert steps[str(week["first"].pk)] == ("met", 0)
    assert steps[str(week["second"].pk)] == ("met", 1)
    assert steps[str(week["third"].pk)] == ("met", 2)
    assert steps[str(week["missed"].pk)] == ("missed", 3)


def test_a_week__per_day_met_within_each_rung_missed_other_and_percentiles(week):
    [report] = sla(NOW)
    assert (report.name, report.ladder_seconds, report.time_zone) == ("test.expect", [3600.0, 7200.0, 10800.0], "UTC")
    assert (report.since, report.until) == ("2026-11-16T00:00:00+00:00", NOW.isoformat())
    assert [day.date for day in report.days] == [f"2026-11-{d}" for d in range(22, 15, -1)]  # newest first
    today, yesterday, *before = report.days
    assert (today.met, today.missed, today.other) == ([1, 1, 1], 1, 1)
    assert (yesterday.met, yesterday.missed, yesterday.other) == ([1, 0, 0], 0, 0)
    assert all((day.met, day.missed, day.other) == ([0, 0, 0], 0, 0) for day in before)
    assert (report.met, report.missed, report.other) == ([2, 1, 1], 1, 1)
    # Met after 15 min, 30 min, 90 min and 3 h: p50 is the 2nd of 4, p95 the 4th.
    assert report.time_to_met_count == 4
    assert (report.time_to_met_p50_seconds, report.time_to_met_p95_seconds) == (1800.0, 10800.0)


def test_one_day__only_today(week):
    [report] = sla(NOW, days=1)
    assert [day.date for day in report.days] == ["2026-11-22"]
    assert report.since == "2026-11-22T00:00:00+00:00"
    assert (report.met, report.missed, report.other) == ([1, 1, 1], 1, 1)
    assert report.time_to_met_count == 3
    assert (report.time_to_met_p50_seconds, report.time_to_met_p95_seconds) == (5400.0, 10800.0)


def test_rows_after_now_are_not_counted(week):
    [report] = sla(T0 + 2 * H)  # the third met and the missed ended at T0 + 3 h
    assert (report.days[0].met, report.days[0].missed, report.days[0].other) == ([1, 1, 0], 0, 1)
    assert report.time_to_met_count == 3


def test_days_in_the_sites_time_zone(declare):
    """Ended at 03:00 UTC on the 22nd: the 22nd in UTC, the evening of the 21st in New York."""
    declare(ladder=LADDER)
    late = started("late", T0 - 8 * H)
    ship(late, T0 - 7 * H)
    [utc] = sla(NOW, days=2)
    assert [(day.date, day.met[0]) for day in utc.days] == [("2026-11-22", 1), ("2026-11-21", 0)]
    with override_settings(TIME_ZONE="America/New_York"):
        [new_york] = sla(NOW, days=2)
    assert new_york.time_zone == "America/New_York"
    assert new_york.since == "2026-11-21T00:00:00-05:00"
    assert [(day.date, day.met[0]) for day in new_york.days] == [("2026-11-22", 0), ("2026-11-21", 1)]


def test_the_percentiles_read_the_latest_met_jobs_only(week, monkeypatch):
    monkeypatch.setattr(sla_module, "SAMPLE", 2)
    [report] = sla(NOW)
    assert report.met == [2, 1, 1]  # the counts are not sampled
    assert report.time_to_met_count == 2  # the second (90 min) and the third (3 h)
    assert (report.time_to_met_p50_seconds, report.time_to_met_p95_seconds) == (5400.0, 10800.0)


def test_a_shorter_ladder_declared_since__keeps_a_column_for_each_rung_met(week, declare):
    declare(ladder=[H])
    [report] = sla(NOW)
    assert report.ladder_seconds == [3600.0]
    assert report.met == [2, 1, 1]


def test_a_row_without_start_or_met_at__counts_from_created_at_to_finished_at(declare, make_thing):
    """Rows written before the payload kept ``start`` and ``met_at`` (made by hand: no code writes
    them any more)."""
    declare(ladder=LADDER)
    JobHistory.objects.create(
        job_id=1, kind="expectation", entity_name="testapp.thing", entity_key="1", job_exec="test.expect",
        outcome="met", first_check_at=T0 + H, created_at=T0, finished_at=T0 + 20 * M, payload={"step": 0},
    )
    [report] = sla(NOW, days=1)
    assert report.met == [1, 0, 0]
    assert report.time_to_met_p50_seconds == 1200.0


def test_names_and_days(week, declare):
    declare("test.other", ladder=[H])
    assert [report.name for report in sla(NOW)] == ["test.expect", "test.other"]
    [other] = sla(NOW, names=["test.other", "test.nope"])
    assert (other.name, other.met, other.time_to_met_count) == ("test.other", [0], 0)
    assert other.time_to_met_p50_seconds is None
    for days in (0, sla_module.MAX_DAYS + 1):
        with pytest.raises(ValueError, match="days must be from 1 to 90"):
            sla(NOW, days=days)


def test_two_queries_whatever_the_number_of_expectations(week, declare, django_assert_num_queries):
    declare("test.other", ladder=[H])
    declare("test.third", ladder=[H])
    with django_assert_num_queries(2):
        assert len(sla(NOW)) == 3


def test_none_declared__no_query(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert sla(NOW) == []
