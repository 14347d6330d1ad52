"""Rule 1: due times round up to slot boundaries aligned to the UTC epoch."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from prescient import slots
from prescient.exceptions import InvalidTime

T = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (T, T),  # on a boundary: unchanged
        (T + timedelta(microseconds=1), T + timedelta(minutes=15)),
        (T - timedelta(microseconds=1), T),
        (T + timedelta(minutes=14, seconds=59), T + timedelta(minutes=15)),
        (T + timedelta(minutes=15), T + timedelta(minutes=15)),
        (T + timedelta(minutes=15, seconds=1), T + timedelta(minutes=30)),
        (datetime(2026, 11, 22, 23, 50, tzinfo=UTC), datetime(2026, 11, 23, 0, 0, tzinfo=UTC)),
    ],
)
def test_round_up__at_and_around_boundaries(value, expected):
    assert slots.round_up(value, 15) == expected


def test_round_up__other_offsets_align_to_utc():
    # 10:05 at +05:30 is 04:35 UTC, which rounds up to 04:45 UTC (10:15 local).
    ist = timezone(timedelta(hours=5, minutes=30))
    value = datetime(2026, 11, 22, 10, 5, tzinfo=ist)
    assert slots.round_up(value, 15) == datetime(2026, 11, 22, 4, 45, tzinfo=UTC)


@pytest.mark.parametrize("minutes", [1, 5, 15, 30, 60, 1440])
def test_round_up__is_a_boundary_and_not_earlier(minutes):
    value = datetime(2026, 11, 22, 10, 7, 31, 123, tzinfo=UTC)
    rounded = slots.round_up(value, minutes)
    assert rounded >= value
    assert rounded - value < timedelta(minutes=minutes)
    assert (rounded - slots.EPOCH) % timedelta(minutes=minutes) == timedelta(0)


def test_next_after__is_strictly_after():
    assert slots.next_after(T, 15) == T + timedelta(minutes=15)
    assert slots.next_after(T + timedelta(seconds=1), 15) == T + timedelta(minutes=15)
    assert slots.next_after(T - timedelta(seconds=1), 15) == T


def test_next_check__never_at_or_before_now():
    assert slots.next_check(T, T, 15) == T + timedelta(minutes=15)
    assert slots.next_check(T + timedelta(hours=3, minutes=1), T, 15) == T + timedelta(hours=3, minutes=15)


def test_naive_datetime_is_refused_with_a_clear_error():
    with pytest.raises(InvalidTime, match="naive"):
        slots.round_up(datetime(2026, 11, 22, 10, 0), 15)
