"""Argument types shared by prescient's management commands, and their base class."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand


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


class PrescientCommand(BaseCommand):
    """A prescient command: its reports (``say``) go to stdout unless ``-v 0``; errors still show."""

    verbosity = 1

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.verbosity = int(options.get("verbosity", 1))
        return super().execute(*args, **options)

    def say(self, text: str) -> None:
        """Write one report line (flushed: a worker's start-up line must show at once), unless -v 0."""
        if self.verbosity >= 1:
            self.stdout.write(text)
            self.stdout.flush()
