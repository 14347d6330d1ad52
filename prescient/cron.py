"""When a recurring schedule's occurrences fall: pure functions of a time; no clock is read here.

A cron expression (five fields, parsed by ``croniter``) is read in an IANA time zone; an
interval counts from the UTC epoch. Daylight saving time follows the rule Debian's cron
documents, implemented here on top of croniter (which iterates naive wall-clock times):

- a wall-clock time that does not exist (clocks jump forward over it) runs once, at the first
  instant after the jump;
- a wall-clock time that happens twice (clocks fall back) runs once, at the first of the two;
- an expression with a wildcard or a step in the hour field runs whenever the wall clock shows
  a matching time: ``0 * * * *`` keeps its one-hour interval in real time on both days.

The time zone's offsets are walked segment by segment (a segment: instants sharing one UTC
offset), so each occurrence is exact whatever the zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter  # type: ignore[import-untyped]

from .exceptions import InvalidSchedule

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_TICK = timedelta(microseconds=1)
#: Transitions of a zone's offset are further apart than this (so a walk in steps finds each).
_STEP = timedelta(days=7)

_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}


def zone(name: str) -> tzinfo:
    """The IANA time zone ``name``; InvalidSchedule if there is none of that name."""
    if not isinstance(name, str) or not name or name != name.strip():
        raise InvalidSchedule(f"Unknown time zone {name!r}: give an IANA name such as 'Europe/Berlin'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(f"Unknown time zone {name!r}: give an IANA name such as 'Europe/Berlin'") from None


def validate(expression: str) -> str:
    """``expression`` with its whitespace normalised; InvalidSchedule naming the bad field."""
    if not isinstance(expression, str):
        raise InvalidSchedule(f"A cron expression must be a string, got {type(expression).__name__}")
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidSchedule(
            f"Cron expression {expression!r} has {len(fields)} fields; give 5: minute hour day-of-month month "
            "day-of-week"
        )
    for index, value in enumerate(fields):
        probe = ["*"] * 5
        probe[index] = value
        if not croniter.is_valid(" ".join(probe)):
            raise InvalidSchedule(f"Cron expression {expression!r}: invalid {FIELDS[index]} field {value!r}")
    normal = " ".join(fields)
    _cron_next(normal, datetime(2000, 1, 1))  # valid field by field, and some day exists
    return normal


def hour_is_wild(expression: str) -> bool:
    """Whether the hour field has a wildcard or a step: such expressions follow the wall clock
    through DST changes rather than running a fixed local time once."""
    hour = expression.split()[1]
    return "*" in hour or "/" in hour


def _local(at: datetime, offset: timedelta) -> datetime:
    return (at.astimezone(UTC) + offset).replace(tzinfo=None)


def _offset(at: datetime, tz: tzinfo) -> timedelta:
    value = at.astimezone(tz).utcoffset()
    assert value is not None
    return value


def _transition(start: datetime, end: datetime, tz: tzinfo) -> datetime | None:
    """The first instant in ``(start, end]`` whose UTC offset differs from ``start``'s, or None."""
    base = _offset(start, tz)
    low = start
    while low < end:
        high = min(low + _STEP, end)
        if _offset(high, tz) != base:
            while high - low > timedelta(seconds=1):  # offsets change on whole seconds
                middle = low + (high - low) / 2
                if _offset(middle, tz) == base:
                    low = middle
                else:
                    high = middle
            return high.replace(microsecond=0) if _offset(high.replace(microsecond=0), tz) != base else high
        low = high
    return None


def _repeated(wall: datetime, at: datetime, tz: tzinfo) -> bool:
    """Whether wall time ``wall``, shown at instant ``at``, was shown before (clocks fell back)."""
    earlier = _offset(at - timedelta(hours=3), tz)
    if earlier <= _offset(at, tz):
        return False
    first = (wall - earlier).replace(tzinfo=UTC)
    return first < at and _offset(first, tz) == earlier


def _cron_next(expression: str, wall: datetime) -> datetime:
    try:
        value = croniter(expression, wall).get_next(datetime)
    except CroniterError as exc:  # e.g. "0 0 31 2 *": valid fields, no such day
        raise InvalidSchedule(f"Cron expression {expression!r} has no occurrence: {exc}") from None
    assert isinstance(value, datetime)
    return value


def next_cron(expression: str, timezone_name: str, after: datetime) -> datetime:
    """The first occurrence of ``expression`` in zone ``timezone_name`` strictly after ``after``
    (an aware datetime), in UTC, by the DST rule of this module."""
    tz = zone(timezone_name)
    wild = hour_is_wild(expression)
    start = after.astimezone(UTC)
    offset = _offset(start, tz)
    floor = _local(start, offset)  # wall times at or before this are behind us
    for _ in range(1000):  # a few segments at most; the bound only guards against a bad zone
        wall = _cron_next(expression, floor)
        candidate = (wall - offset).replace(tzinfo=UTC)
        change = _transition(start, candidate, tz)
        if change is None:
            if not wild and _repeated(wall, candidate, tz):
                floor = wall  # ``after`` is inside a repeated hour: this wall time already ran
                continue
            return candidate
        new_offset = _offset(change, tz)
        old_wall, new_wall = _local(change, offset), _local(change, new_offset)
        if new_offset > offset:  # spring forward: wall times in [old_wall, new_wall) do not exist
            if not wild and _cron_next(expression, old_wall - _TICK) < new_wall:
                return change  # run once, at the first instant after the jump
            floor = new_wall - _TICK
        else:  # fall back: wall times in [new_wall, old_wall) happen again
            floor = new_wall - _TICK if wild else old_wall - _TICK
        start, offset = change, new_offset
    raise InvalidSchedule(f"Cron expression {expression!r} has no occurrence after {after.isoformat()}")


def next_every(interval: timedelta, after: datetime) -> datetime:
    """The first multiple of ``interval`` from the UTC epoch strictly after ``after``."""
    return EPOCH + interval * ((after - EPOCH) // interval + 1)


# --- in words ------------------------------------------------------------------------------------


def _clock(hour: str, minute: str) -> str:
    return f"{int(hour):02d}:{int(minute):02d}"


def _day_name(value: str) -> str | None:
    key = value.lower()
    if key in _NAMES:
        return _DAYS[_NAMES[key]]
    if key.isdigit() and 0 <= int(key) <= 7:
        return _DAYS[int(key) % 7]
    return None


def describe(expression: str) -> str:
    """``expression`` in words where it is a common shape (``every Monday at 09:00``), else the
    expression itself (``cron 5,35 1-4 * * *``)."""
    minute, hour, dom, month, dow = expression.split()
    simple_time = minute.isdigit() and hour.isdigit()
    if simple_time and dom == "*" and month == "*":
        at = _clock(hour, minute)
        if dow == "*":
            return f"every day at {at}"
        names = [_day_name(part) for part in dow.split(",")]
        if all(names):
            return f"every {', '.join(n for n in names if n)} at {at}"
        if dow.lower() in {"1-5", "mon-fri"}:
            return f"every weekday at {at}"
    if simple_time and dom.isdigit() and month == "*" and dow == "*":
        return f"on day {int(dom)} of every month at {_clock(hour, minute)}"
    if minute.isdigit() and hour == "*" and dom == month == dow == "*":
        return f"every hour at minute {int(minute)}"
    if minute.startswith("*/") and minute[2:].isdigit() and hour == dom == month == dow == "*":
        return f"every {int(minute[2:])} minutes"
    if expression == "* * * * *":
        return "every minute"
    return f"cron {expression}"


def describe_every(interval: timedelta) -> str:
    """An interval in words: ``every 6 hours``, ``every 90 minutes``."""
    seconds = int(interval.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {seconds} seconds"


def next_occurrence(expression: str, every_seconds: int | None, timezone_name: str, after: datetime) -> datetime:
    """The first occurrence strictly after ``after`` of a cron expression or an interval."""
    if every_seconds:
        return next_every(timedelta(seconds=every_seconds), after)
    return next_cron(expression, timezone_name, after)


def in_words(expression: str, every_seconds: int | None, timezone_name: str) -> str:
    """A schedule's timing in words: ``every Monday at 09:00, America/New_York``."""
    if every_seconds:
        return describe_every(timedelta(seconds=every_seconds))
    return f"{describe(expression)}, {timezone_name}"
