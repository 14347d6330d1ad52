"""Business hours: calendars whose offsets count open time only (``PRESCIENT["CALENDARS"]``).

    PRESCIENT = {"CALENDARS": {"support": {
        "timezone": "Europe/Berlin",
        "hours": {"mon-fri": "09:00-17:00", "sat": "10:00-12:00,13:00-15:00"},
        "closed": ["2026-12-25"],
        "holidays": "DE",  # a country's public holidays (the optional ``holidays`` package)
    }}}

``Calendar.add(start, offset)`` is ``start`` plus ``offset`` of open time: Friday 16:00 plus
two hours is Monday 10:00 in the calendar's time zone. Hours are wall-clock times of that
zone, so a day on which the clocks change is open for its real length (an open day of
``00:00-24:00`` lasts 23 hours on the spring change). Pure arithmetic: no clock is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ImproperlyConfigured

from .conf import setting

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: How many days ahead open time is looked for before giving up (a calendar that is never open).
MAX_DAYS = 5 * 366
_RANGE = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")
_KEYS = frozenset({"timezone", "hours", "closed", "holidays"})


class CalendarError(ImproperlyConfigured):
    """A calendar that is not defined, or not defined well."""


@dataclass(frozen=True)
class Calendar:
    """One calendar: its time zone, its open hours per weekday (minutes from midnight) and the
    days it is closed (dates given, and a country's public holidays)."""

    name: str
    zone: ZoneInfo
    #: Seven tuples (Monday first) of (opens, closes) in minutes from midnight; 1440 is 24:00.
    hours: tuple[tuple[tuple[int, int], ...], ...]
    closed: frozenset[date] = frozenset()
    #: A country code for the ``holidays`` package ("DE", or "DE-BY" with a subdivision); "".
    holidays: str = ""

    def is_closed(self, day: date) -> bool:
        """Whether ``day`` is closed all day (a date given, or a public holiday)."""
        return day in self.closed or (bool(self.holidays) and day in _public_holidays(self.holidays, day.year))

    def open_periods(self, day: date) -> Iterator[tuple[datetime, datetime]]:
        """The open periods of ``day`` (a date of the calendar's zone), as aware UTC times."""
        if self.is_closed(day):
            return
        for opens, closes in self.hours[day.weekday()]:
            yield self._at(day, opens), self._at(day, closes)

    def _at(self, day: date, minutes: int) -> datetime:
        extra, minutes = divmod(minutes, 1440)  # 24:00 is the next day's midnight
        local = datetime.combine(day + timedelta(days=extra), time(minutes // 60, minutes % 60), tzinfo=self.zone)
        return local.astimezone(UTC)

    def add(self, start: datetime, offset: timedelta) -> datetime:
        """``start`` plus ``offset`` of open time (an aware datetime, in UTC). An offset of zero
        is the first open moment at or after ``start``. Raises CalendarError when no open time
        is found within :data:`MAX_DAYS` days."""
        if start.tzinfo is None or start.utcoffset() is None:
            raise ValueError(f"start must be an aware datetime, got {start!r}")
        if offset < timedelta(0):
            raise ValueError(f"offset must not be negative, got {offset}")
        start = start.astimezone(UTC)
        remaining = offset
        day = start.astimezone(self.zone).date()
        for _ in range(MAX_DAYS):
            for opens, closes in self.open_periods(day):
                begin = max(opens, start)
                if begin >= closes:
                    continue
                if remaining <= closes - begin:
                    return begin + remaining
                remaining -= closes - begin
            day += timedelta(days=1)
        raise CalendarError(
            f"Calendar {self.name!r} has no open time left within {MAX_DAYS} days of {start.isoformat()}"
        )


def worst_case(calendar: Calendar, offset: timedelta, since: datetime, days: int = 366) -> tuple[timedelta, datetime]:
    """The longest wall-clock time ``offset`` of open time takes in ``calendar`` from a start
    within ``days`` days of ``since``, and that start. Starts are tried at each open period's
    closing time (the worst moment: no open time until the next opening) and at each midnight."""
    worst, worst_start = timedelta(0), since
    day = since.astimezone(calendar.zone).date()
    for _ in range(days):
        starts = [calendar._at(day, 0), *(closes for _, closes in calendar.open_periods(day))]
        for start in starts:
            took = calendar.add(start, offset) - start
            if took > worst:
                worst, worst_start = took, start
        day += timedelta(days=1)
    return worst, worst_start


@lru_cache(maxsize=64)
def _public_holidays(country: str, year: int) -> frozenset[date]:
    try:
        import holidays
    except ImportError:
        raise CalendarError(
            f"A calendar names holidays {country!r}: install the optional `holidays` package (prescient[holidays])"
        ) from None
    code, _, subdivision = country.partition("-")
    try:
        found = holidays.country_holidays(code, subdiv=subdivision or None, years=year)
    except NotImplementedError as exc:
        raise CalendarError(f"The holidays package knows no country {country!r}: {exc}") from None
    return frozenset(found)


def _minutes(hours: str, minutes: str, spec: str) -> int:
    value = int(hours) * 60 + int(minutes)
    if int(minutes) > 59 or value > 1440:
        raise ValueError(f"{spec!r} is not a time of day")
    return value


def _days(spec: str) -> list[int]:
    days: list[int] = []
    for part in spec.lower().replace(" ", "").split(","):
        first, _, last = part.partition("-")
        if first not in DAYS or (last and last not in DAYS):
            raise ValueError(f"{spec!r}: days are {', '.join(DAYS)}, as 'mon-fri' or 'sat,sun'")
        a, b = DAYS.index(first), DAYS.index(last or first)
        if b < a:
            raise ValueError(f"{spec!r}: a range of days runs forward (mon-fri)")
        days.extend(range(a, b + 1))
    return days


def _periods(spec: Any) -> list[tuple[int, int]]:
    parts = spec.split(",") if isinstance(spec, str) else spec
    if not isinstance(parts, (list, tuple)):
        raise ValueError(f"{spec!r}: open hours are a string like '09:00-17:00' (or several, comma-separated)")
    periods = []
    for part in parts:
        match = _RANGE.match(str(part))
        if match is None:
            raise ValueError(f"{part!r} is not a range of times like '09:00-17:00'")
        opens = _minutes(match[1], match[2], str(part))
        closes = _minutes(match[3], match[4], str(part))
        if closes <= opens:
            raise ValueError(f"{part!r} closes before it opens (a period may not cross midnight)")
        periods.append((opens, closes))
    periods.sort()
    if any(b[0] < a[1] for a, b in pairwise(periods)):
        raise ValueError(f"{spec!r}: open periods overlap")
    return periods


def parse(name: str, spec: Any) -> Calendar:
    """The calendar ``name`` defined by ``spec`` (one value of ``CALENDARS``); CalendarError
    saying what is wrong otherwise."""
    where = f"PRESCIENT['CALENDARS'][{name!r}]"
    if not isinstance(spec, Mapping):
        raise CalendarError(f"{where} must be a dict with 'timezone' and 'hours'; got {spec!r}")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise CalendarError(f"{where} has unknown keys {unknown}; known: {sorted(_KEYS)}")
    try:
        zone = ZoneInfo(str(spec.get("timezone", "UTC")))
    except (ZoneInfoNotFoundError, ValueError):
        raise CalendarError(f"{where}['timezone'] is not a known time zone: {spec.get('timezone')!r}") from None
    hours: list[list[tuple[int, int]]] = [[] for _ in DAYS]
    given = spec.get("hours")
    if not isinstance(given, Mapping) or not given:
        raise CalendarError(f"{where}['hours'] must be a dict like {{'mon-fri': '09:00-17:00'}}; got {given!r}")
    try:
        for days, periods in given.items():
            for day in _days(str(days)):
                hours[day].extend(_periods(periods))
        for day_periods in hours:
            _periods([f"{a // 60}:{a % 60:02d}-{b // 60}:{b % 60:02d}" for a, b in day_periods])  # no overlaps
        closed = frozenset(date.fromisoformat(str(day)) for day in spec.get("closed", ()))
    except ValueError as exc:
        raise CalendarError(f"{where}: {exc}") from None
    country = spec.get("holidays") or ""
    if not isinstance(country, str):
        raise CalendarError(f"{where}['holidays'] must be a country code such as 'DE'; got {country!r}")
    calendar = Calendar(name, zone, tuple(tuple(sorted(day)) for day in hours), closed, country.upper())
    if country:
        _public_holidays(calendar.holidays, 2026)  # the package and the country exist (any year)
    return calendar


def get_calendar(name: str) -> Calendar:
    """The calendar ``name`` of ``PRESCIENT["CALENDARS"]``; CalendarError when it is not defined."""
    defined = setting("CALENDARS") or {}
    if name not in defined:
        known = ", ".join(repr(n) for n in sorted(defined)) or "none"
        raise CalendarError(f"No calendar {name!r} in PRESCIENT['CALENDARS'] (defined: {known})")
    return parse(name, defined[name])


def problems() -> list[str]:
    """What is wrong with each calendar of ``PRESCIENT["CALENDARS"]``, one sentence each."""
    found = []
    for name, spec in (setting("CALENDARS") or {}).items():
        try:
            parse(str(name), spec)
        except CalendarError as exc:
            found.append(str(exc))
    return found
