"""The occurrences of cron expressions and intervals, across daylight saving time (pure maths)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from prescient import cron
from prescient.exceptions import InvalidSchedule


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def occurrences(expression: str, zone: str, after: datetime, count: int) -> list[datetime]:
    found, at = [], after
    for _ in range(count):
        at = cron.next_cron(expression, zone, at)
        found.append(at)
    return found


def test_berlin_spring_forward__a_missing_time_runs_once_right_after_the_jump():
    assert occurrences("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), 3) == [
        utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30),
    ]


def test_berlin_fall_back__a_repeated_time_runs_once_at_the_first():
    assert occurrences("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30),
    ]


def test_berlin_fall_back__created_inside_the_repeated_hour_does_not_run_it_again():
    assert cron.next_cron("30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)


def test_new_york_spring_forward_and_fall_back():
    assert occurrences("30 2 * * *", "America/New_York", utc(2026, 3, 7, 12), 2) == [
        utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30),
    ]
    assert occurrences("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2) == [
        utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30),
    ]


@pytest.mark.parametrize(("zone", "start"), [
    ("Europe/Berlin", utc(2026, 3, 28, 22)), ("Europe/Berlin", utc(2026, 10, 24, 22)),
    ("America/New_York", utc(2026, 3, 8, 4)), ("America/New_York", utc(2026, 11, 1, 3)),
])
def test_a_wildcard_hour_keeps_its_interval_in_real_time(zone, start):
    found = occurrences("0 * * * *", zone, start, 6)
    assert [b - a for a, b in itertools.pairwise(found)] == [timedelta(hours=1)] * 5


def test_weekly_in_new_york_follows_local_time():
    assert occurrences("0 9 * * MON", "America/New_York", utc(2026, 3, 1), 2) == [
        utc(2026, 3, 2, 14), utc(2026, 3, 9, 13),
    ]


def test_every__multiples_of_the_interval_from_the_epoch():
    assert cron.next_every(timedelta(hours=6), utc(2026, 1, 1, 6)) == utc(2026, 1, 1, 12)
    assert cron.next_every(timedelta(hours=6), utc(2026, 1, 1, 5, 59)) == utc(2026, 1, 1, 6)


@pytest.mark.parametrize(("expression", "message"), [
    ("61 * * * *", "invalid minute field '61'"), ("0 25 * * *", "invalid hour field '25'"),
    ("0 0 32 * *", "invalid day of month field"), ("0 0 * 13 *", "invalid month field"),
    ("0 0 * * FOO", "invalid day of week field 'FOO'"), ("0 0 *", "has 3 fields"),
    ("0 0 31 2 *", "has no occurrence"),
])
def test_validate__names_the_bad_field(expression, message):
    with pytest.raises(InvalidSchedule, match=message):
        cron.validate(expression)


def test_zone__unknown_is_refused():
    with pytest.raises(InvalidSchedule, match="Unknown time zone 'Mars/Olympus'"):
        cron.zone("Mars/Olympus")


def test_describe__in_words():
    assert cron.describe("0 9 * * MON") == "every Monday at 09:00"
    assert cron.describe("0 2 * * *") == "every day at 02:00"
    assert cron.describe("*/15 * * * *") == "every 15 minutes"
    assert cron.describe("5,35 1-4 * * *") == "cron 5,35 1-4 * * *"
    assert cron.describe_every(timedelta(hours=6)) == "every 6 hours"
