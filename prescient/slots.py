"""Slot arithmetic: pure functions of a time and a slot length. No clock is read here.

Slots are aligned to the UTC epoch, so a 15-minute slot has boundaries at :00, :15, :30 and :45
of every hour in UTC (and in every zone whose offset is a whole number of slots).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from .exceptions import InvalidTime

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def require_aware(value: datetime, what: str = "time") -> datetime:
    """Return ``value`` if it carries a UTC offset, else raise :class:`InvalidTime`."""
    if not isinstance(value, datetime):
        raise InvalidTime(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidTime(f"{what} {value.isoformat()} is naive: give a timezone-aware datetime")
    return value


def _slot(slot_minutes: int) -> timedelta:
    if slot_minutes <= 0:
        raise ValueError(f"slot_minutes must be positive, got {slot_minutes}")
    return timedelta(minutes=slot_minutes)


def round_up(value: datetime, slot_minutes: int) -> datetime:
    """The first slot boundary at or after ``value`` (returned in UTC)."""
    require_aware(value)
    slot = _slot(slot_minutes)
    since = value - EPOCH
    whole, rest = divmod(since, slot)
    return EPOCH + slot * (whole + (1 if rest else 0))


def floor(value: datetime, slot_minutes: int) -> datetime:
    """The last slot boundary at or before ``value`` (the slot ``value`` falls in)."""
    require_aware(value)
    slot = _slot(slot_minutes)
    return EPOCH + slot * ((value - EPOCH) // slot)


def next_after(value: datetime, slot_minutes: int) -> datetime:
    """The first slot boundary strictly after ``value``."""
    return floor(value, slot_minutes) + _slot(slot_minutes)


def next_check(wanted: datetime, now: datetime, slot_minutes: int) -> datetime:
    """Where a re-check asked for at ``wanted`` lands: the first boundary strictly after ``now``
    and at or after ``wanted``."""
    return max(round_up(wanted, slot_minutes), next_after(now, slot_minutes))


def after_slot(delay: timedelta, now: datetime, slot_minutes: int) -> datetime:
    """Where a re-check asked for ``delay`` from now lands, counted from the slot being processed
    (the boundary at or before ``now``), not from how late in that slot the run came: at
    05:00:01, one hour lands at 06:00. Rounded up, and strictly after ``now``'s slot, as
    :func:`next_check`. Raises OverflowError past the last date."""
    return next_check(floor(now, slot_minutes) + delay, now, slot_minutes)


def spread_offset(key: str, spread: timedelta) -> timedelta:
    """A fixed offset in ``[0, spread)`` derived from ``key`` (a job's entity and check): where
    its runs start within their slot when a check spreads its slot's herd (the same key, the
    same offset, whatever the process)."""
    # A cryptographic digest, not a CRC: keys that differ in a digit (consecutive ids) must
    # scatter over the slot evenly.
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return timedelta(microseconds=int(spread / timedelta(microseconds=1) * fraction))


def at_offset(value: datetime, slot_minutes: int, offset: timedelta) -> datetime:
    """The first time at or after ``value`` that lies ``offset`` into its slot: a slot
    boundary ``B`` becomes ``B + offset``; any other time the next such point."""
    require_aware(value)
    slot = _slot(slot_minutes)
    at = floor(value, slot_minutes) + offset
    return at if at >= value else at + slot
