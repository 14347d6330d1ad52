"""Business hours (prescient/calendars.py): offsets count open time only, across a weekend, a
closed day, public holidays (the optional ``holidays`` package) and the DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Q
from django.test import override_settings

import prescient
from prescient.calendars import CalendarError, get_calendar, parse, problems, worst_case
from tests.testapp.models import Thing

BERLIN = ZoneInfo("Europe/Berlin")
SUPPORT = {"timezone": "Europe/Berlin", "hours": {"mon-fri": "09:00-17:00"}, "closed": ["2026-12-25"]}
CALENDARS = {
    "support": SUPPORT,
    "support-de": {**SUPPORT, "holidays": "DE"},
    "always": {"timezone": "Europe/Berlin", "hours": {"mon-sun": "00:00-24:00"}},
    "tokyo": {"timezone": "Asia/Tokyo", "hours": {"mon-fri": "09:00-18:00"}},
}
H = timedelta(hours=1)


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN)  # type: ignore[misc]


@pytest.fixture(autouse=True)
def calendars():
    with override_settings(PRESCIENT={"SLOT_MINUTES": 15, "TIMEOUT_SECONDS": 2, "CALENDARS": CALENDARS}):
        yield


def test_add__friday_afternoon_plus_two_hours_is_monday_morning():
    assert get_calendar("support").add(berlin(2026, 11, 27, 16, 0), 2 * H) == berlin(2026, 11, 30, 10, 0)


def test_add__within_a_day_and_from_before_opening():
    support = get_calendar("support")
    assert support.add(berlin(2026, 11, 24, 10, 0), 3 * H) == berlin(2026, 11, 24, 13, 0)
    assert support.add(berlin(2026, 11, 24, 6, 0), 3 * H) == berlin(2026, 11, 24, 12, 0)
    assert support.add(berlin(2026, 11, 24, 6, 0), timedelta(0)) == berlin(2026, 11, 24, 9, 0)
    assert support.add(berlin(2026, 11, 24, 10, 0), 7 * H) == berlin(2026, 11, 24, 17, 0)
    assert support.add(berlin(2026, 11, 24, 10, 0), 8 * H) == berlin(2026, 11, 25, 10, 0)


def test_add__skips_a_closed_day_and_the_weekend():
    # Thursday 24 December, 16:00 + 2 h: Friday 25 is closed, then the weekend.
    assert get_calendar("support").add(berlin(2026, 12, 24, 16, 0), 2 * H) == berlin(2026, 12, 28, 10, 0)


def test_add__skips_public_holidays_with_the_holidays_package():
    pytest.importorskip("holidays")
    # Maundy Thursday 2 April 2026, 16:00 + 2 h: Good Friday, the weekend and Easter Monday are closed.
    start = berlin(2026, 4, 2, 16, 0)
    assert get_calendar("support").add(start, 2 * H) == berlin(2026, 4, 3, 10, 0)
    assert get_calendar("support-de").add(start, 2 * H) == berlin(2026, 4, 7, 10, 0)


def test_add__across_the_spring_dst_change():
    # Friday 27 March 2026 16:00 CET (15:00 UTC) + 2 h: Monday 30 March 10:00 CEST (08:00 UTC).
    got = get_calendar("support").add(berlin(2026, 3, 27, 16, 0), 2 * H)
    assert got == datetime(2026, 3, 30, 8, 0, tzinfo=UTC)
    # Always open: 24 hours of open time are 24 real hours, whatever the wall clock says.
    start = berlin(2026, 3, 28, 12, 0)
    got = get_calendar("always").add(start, 24 * H)
    assert got - start == 24 * H and got.astimezone(BERLIN).hour == 13


def test_add__across_the_autumn_dst_change():
    # Friday 23 October 2026 16:00 CEST (14:00 UTC) + 2 h: Monday 26 October 10:00 CET (09:00 UTC).
    got = get_calendar("support").add(berlin(2026, 10, 23, 16, 0), 2 * H)
    assert got == datetime(2026, 10, 26, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"timezone": "Mars/Olympus", "hours": {"mon": "09:00-17:00"}}, "time zone"),
        ({"hours": {"someday": "09:00-17:00"}}, "days are"),
        ({"hours": {"mon": "17:00-09:00"}}, "closes before it opens"),
        ({"hours": {"mon": "09:00-12:00,11:00-13:00"}}, "overlap"),
        ({"hours": {"mon": "9 to 5"}}, "not a range"),
        ({"hours": {}}, "must be a dict"),
        ({"hours": {"mon": "09:00-17:00"}, "closed": ["tomorrow"]}, "isoformat|Invalid"),
        ({"hours": {"mon": "09:00-17:00"}, "color": "red"}, "unknown keys"),
    ],
)
def test_parse__says_what_is_wrong(spec, message):
    with pytest.raises(CalendarError, match=message):
        parse("x", spec)


def test_problems__of_the_settings_and_an_unknown_name():
    assert problems() == []
    with override_settings(PRESCIENT={"CALENDARS": {"bad": {"hours": {"mon": "x"}}}}):
        assert len(problems()) == 1
    with pytest.raises(CalendarError, match="No calendar 'nope'.*support"):
        get_calendar("nope")


def test_add__a_calendar_never_open_gives_up():
    closed = parse("x", {"hours": {"mon": "09:00-10:00"}})
    never = type(closed)("never", closed.zone, tuple(() for _ in range(7)))
    with pytest.raises(CalendarError, match="no open time"):
        never.add(berlin(2026, 1, 1, 0, 0), H)


@pytest.mark.django_db
def test_expect__with_a_calendar_counts_its_ladder_in_open_time(declare):
    declare(calendar="support", ladder=[2 * H, 10 * H])
    job = prescient.expect(Thing.objects.create(), "test.expect", now=berlin(2026, 11, 27, 16, 0))
    assert job is not None
    assert job.next_check_at == berlin(2026, 11, 30, 10, 0)
    assert job.payload["rungs"][1] == berlin(2026, 12, 1, 10, 0).astimezone(UTC).isoformat()
    assert job.payload["calendar"] == "support"


@pytest.mark.django_db
def test_expect__a_callable_picks_each_instances_calendar(declare):
    declare(calendar=lambda thing: thing.name, ladder=[3 * H], met=Q(status="done"))
    friday = datetime(2026, 11, 27, 7, 0, tzinfo=UTC)  # 08:00 in Berlin, 16:00 in Tokyo
    in_berlin = prescient.expect(Thing.objects.create(name="support"), "test.expect", now=friday)
    in_tokyo = prescient.expect(Thing.objects.create(name="tokyo"), "test.expect", now=friday)
    assert in_berlin is not None and in_tokyo is not None
    assert in_berlin.next_check_at == berlin(2026, 11, 27, 12, 0)
    assert in_tokyo.next_check_at == datetime(2026, 11, 30, 10, 0, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert in_tokyo.payload["calendar"] == "tokyo"


# --- a ladder counted in open time, against the horizon (issue #34, item 2) ------------------------


def e032(name: str) -> list[str]:
    from prescient.engine.kind import get_kind

    return [e.msg for e in get_kind("expectation").system_checks() if name in e.msg and e.id == "prescient.E032"]


def test_worst_case__a_start_at_friday_close_waits_out_the_weekend():
    calendar = get_calendar("support")  # 09:00-17:00 Monday to Friday, Berlin
    worst, start = worst_case(calendar, 8 * H, berlin(2026, 11, 23, 12, 0), days=14)
    # Started at a Friday's 17:00, 8 open hours end on Monday at 17:00: 3 days later.
    assert worst == timedelta(days=3) and start.astimezone(ZoneInfo("Europe/Berlin")).weekday() == 4


@pytest.mark.django_db
def test_system_checks__a_business_ladder_that_can_outrun_the_horizon_is_E032(declare):
    # 15 working days of 8 hours (120 hours: 5 days on the wall clock, within a 20 days'
    # horizon) take at least 21 days from a Friday's close, every year; more with holidays.
    declare("test.long", calendar="support-de", ladder=[8 * H, 120 * H], horizon_days=20)
    [message] = e032("test.long")
    assert "support-de" in message and "beyond the horizon (20 days" in message
    # 5 working days: a week, 11 days at most over Christmas and New Year.
    declare("test.fits", calendar="support-de", ladder=[8 * H, 40 * H], horizon_days=20)
    assert e032("test.fits") == []


@pytest.mark.django_db
def test_system_checks__a_callable_calendar_is_judged_in_each_calendar_it_may_pick(declare):
    declare("test.any", calendar=lambda thing: thing.name, ladder=[120 * H], horizon_days=20)
    found = e032("test.any")
    assert any("'support-de'" in message for message in found), found


@pytest.mark.django_db
def test_expect__a_ladder_the_check_passed_does_not_raise_in_the_hosts_save(declare):
    declare(calendar="support-de", ladder=[8 * H, 40 * H], horizon_days=20)
    assert e032("test.expect") == []
    christmas_eve = berlin(2026, 12, 23, 17, 0)
    assert prescient.expect(Thing.objects.create(), "test.expect", now=christmas_eve) is not None
