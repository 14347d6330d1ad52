"""Argument types shared by prescient's management commands, and their base class."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, NoReturn

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from prescient import conf

#: The times a command takes (``--now``, ``--at``, ``--until``): a wide margin inside
#: Python's years 1 to 9999, so that a horizon or a delay added (up to 100 years each) or a
#: retention taken off never passes the first or the last date (an OverflowError).
FIRST_TIME = datetime(1000, 1, 1, tzinfo=UTC)
LAST_TIME = datetime(8999, 12, 31, 23, 59, 59, tzinfo=UTC)


def aware_datetime(text: str) -> datetime:
    """argparse type: an ISO 8601 date-time with a UTC offset, from FIRST_TIME to LAST_TIME."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date-time (e.g. 2026-11-22T10:15:00+00:00)"
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset: add one, e.g. +00:00 or Z")
    try:
        inside = FIRST_TIME <= value <= LAST_TIME
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the first date in UTC
        inside = False
    if not inside:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: give a time from {FIRST_TIME.date()} to {LAST_TIME.date()} (UTC)"
        )
    return value


class Whole:
    """argparse type: a whole number from ``least`` to ``most``. Every number a prescient
    command takes has a range (tests/management/test_option_ranges.py fails for one without),
    so that a value out of it is refused naming the option and the range, never handed to the
    database (a LIMIT of 10**30) or to the clock (a delay past the year 9999)."""

    def __init__(self, least: int, most: int, unit: str = "", note: str = "") -> None:
        self.least, self.most, self.unit, self.note = least, most, unit, note

    def __call__(self, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not self.least <= value <= self.most:
            shown = text if len(text) <= 40 else text[:39] + "…"
            raise argparse.ArgumentTypeError(f"must be {self.allowed}; got {shown!r}")
        return value

    @property
    def allowed(self) -> str:
        return f"a whole number{self.unit} from {self.least:,} to {self.most:,}{self.note}"

    def __repr__(self) -> str:
        return f"Whole({self.least}, {self.most})"


#: A job's id (a 64-bit primary key).
job_id = Whole(1, 2**63 - 1)
#: Jobs claimed per batch by a tick or a worker: as many as ``BATCH_SIZE`` may be.
batch_size = Whole(1, conf.MAX_BATCH_SIZE)
#: Rows written or deleted per statement (backfill, prune): each one short statement.
rows_per_statement = Whole(1, 100_000)
#: Rows a listing prints: a 32-bit count, a LIMIT every database takes.
row_limit = Whole(1, 2**31 - 1)
#: A worker's child processes (each a process with its own database connection).
concurrency = Whole(1, 1_000)
lanes = Whole(1, 1_024)
#: A delay from now: up to the longest horizon, so the due time never passes the last date.
delay_seconds = Whole(0, conf.MAX_DELAY_SECONDS, " of seconds", " (100 years)")


class PrescientCommand(BaseCommand):
    """A prescient command: its reports (``say``) go to stdout unless ``-v 0``; errors still show.

    Before its work it validates the settings and makes sure prescient's tables exist: a
    command on a database that was never migrated says so in one line and exits with status 1.

    From the command line every refusal is one line and exit status 1, a bad argument
    (``--limit 10**30``, a date without an offset) included: argparse's usage message and exit
    status 2 are not used. With ``--json`` a refusal is one JSON object on stdout,
    ``{"error": "..."}``, so that a script reads one format whatever happens.
    """

    verbosity = 1
    #: Whether the command reads or writes prescient's tables (all of them do today).
    needs_tables = True
    #: Whether a refusal is printed as JSON (set from the command line: ``--json`` was given).
    json_refusals = False

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # A bad argument raises CommandError (as it does under call_command), which
        # run_from_argv prints in one line: never argparse's usage and exit status 2.
        parser.called_from_command_line = False
        return parser

    def run_from_argv(self, argv: list[str]) -> None:
        self.json_refusals = "--json" in argv[2:] and takes_json(self, argv)
        try:
            super().run_from_argv(argv)
        except CommandError as exc:  # a bad argument (Django's own handling covers execute())
            if "--traceback" in argv[2:]:
                raise
            self.refuse(exc)

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.verbosity = int(options.get("verbosity", 1))
        if options.get("json") and getattr(self, "_called_from_command_line", False):
            self.json_refusals = True  # --json as parsed (argparse takes "--js" for it too)
        try:
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
        except CommandError as exc:
            if self.json_refusals and not options.get("traceback"):
                self.refuse(exc)
            raise

    def refuse(self, exc: CommandError) -> NoReturn:
        """Print a refusal from the command line, one line on stderr (or one JSON object on
        stdout with ``--json``), and exit with its status (1)."""
        text = str(exc).removeprefix("Error: ")  # argparse's errors, as Django raises them
        if self.json_refusals:
            self.stdout.write(json.dumps({"error": text}))
        else:
            self.stderr.write(f"{type(exc).__name__}: {text}")
        sys.exit(exc.returncode)

    def emit(self, data: Any) -> None:
        """Write ``data`` as one line of JSON (for scripts; written whatever the verbosity)."""
        self.stdout.write(json.dumps(data, sort_keys=True, default=str))
        self.stdout.flush()

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


def takes_json(command: BaseCommand, argv: list[str]) -> bool:
    """Whether ``command`` has a ``--json`` option."""
    parser = command.create_parser(argv[0], argv[1])
    return any("--json" in action.option_strings for action in parser._actions)


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
