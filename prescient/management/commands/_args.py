"""Argument types shared by prescient's management commands, and their base class."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections

from prescient import conf


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
    """A prescient command: its reports (``say``) go to stdout unless ``-v 0``; errors still show.

    Before its work it validates the settings and makes sure prescient's tables exist: a
    command on a database that was never migrated says so in one line and exits with status 1.
    """

    verbosity = 1
    #: Whether the command reads or writes prescient's tables (all of them do today).
    needs_tables = True

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.verbosity = int(options.get("verbosity", 1))
        # At start, --skip-checks or not: a bad setting stops the command before it claims
        # anything (TIMEOUT_SECONDS = -1 would crash a tick holding its claims; an error
        # handler that cannot be imported would fail every failed run again and again).
        try:
            conf.validate(imports=True)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        if self.needs_tables:
            require_tables(DEFAULT_DB_ALIAS)
        return super().execute(*args, **options)

    def say(self, text: str) -> None:
        """Write one report line (flushed: a worker's start-up line must show at once), unless -v 0."""
        if self.verbosity >= 1:
            self.stdout.write(text)
            self.stdout.flush()


@contextlib.contextmanager
def memory_cap(megabytes: int | None) -> Iterator[None]:
    """Cap this process's address space (the soft ``RLIMIT_AS``) to ``megabytes`` while the
    block runs, as a worker caps its children: an allocation over it raises MemoryError in the
    check that made it. The previous cap comes back afterwards (the hard limit is left alone)."""
    if not megabytes:
        yield
        return
    import resource  # POSIX only; reached only when a cap is set

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(megabytes) * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def require_tables(alias: str) -> None:
    """Raise CommandError, one line, when prescient's tables are missing from database
    ``alias`` (``migrate`` not run yet): on SQLite a worker would otherwise retry forever, on
    PostgreSQL end in a traceback."""
    wanted = {model._meta.db_table for model in apps.get_app_config("prescient").get_models()}
    connection = connections[alias]
    with connection.cursor() as cursor:
        present = set(connection.introspection.table_names(cursor))
    missing = sorted(wanted - present)
    if missing:
        raise CommandError(
            f"the prescient tables are missing from database {alias!r} ({len(missing)} of {len(wanted)}, "
            f"e.g. {missing[0]}): run python manage.py migrate"
        )
