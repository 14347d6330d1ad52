"""Argument types shared by prescient's management commands."""

from __future__ import annotations

import argparse
from datetime import datetime


def aware_datetime(text: str) -> datetime:
    """argparse type: an ISO 8601 date-time with a UTC offset."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date-time (e.g. 2026-11-22T10:15:00+00:00)"
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset: add one, e.g. +00:00 or Z")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number greater than zero."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number > 0")
    return value
