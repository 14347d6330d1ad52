"""Every number and time a prescient command takes has a range, and a value out of it is one
line, ``CommandError`` naming the option and the range, exit status 1 (issue #32, item 6):
``prescient_jobs --limit 10**30`` ended in a DataError traceback, ``prescient_schedule
--delay-seconds 10**20`` in an OverflowError.

The cases are read from the commands' parsers: a numeric option without a range (a ``type``
that turns "1" into a number but is no ``Whole``) fails, so a new one cannot slip in unbounded.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from prescient.management.commands._args import FIRST_TIME, LAST_TIME, Whole, aware_datetime
from prescient.models import FutureJob
from tests.conftest import manage
from tests.test_docs import command_names

DJANGO_OWN = {
    string for action in BaseCommand().create_parser("manage.py", "x")._actions for string in action.option_strings
}


def options_of(name: str) -> list[tuple[str, Callable[[str], Any]]]:
    """``(option, type)`` of each option of command ``name`` that has a type (Django's own left out)."""
    parser = load_command_class("prescient", name).create_parser("manage.py", name)
    found = []
    for action in parser._actions:
        if action.type is None or not action.option_strings or set(action.option_strings) & DJANGO_OWN:
            continue
        found.append((max(action.option_strings, key=len), action.type))
    return found


def is_number(kind: Callable[[str], Any]) -> bool:
    """Whether an argparse type makes numbers (what it makes of "1")."""
    if kind in (int, float):
        return True
    try:
        value = kind("1")
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_cases() -> list[Any]:
    cases = []
    for name in command_names():
        for option, kind in options_of(name):
            if not is_number(kind):
                continue
            if not isinstance(kind, Whole):
                cases.append(pytest.param(name, option, None, "", id=f"{name} {option} has no range"))
                continue
            for value in (kind.least - 1, kind.most + 1, 10**30, "1e30"):
                cases.append(pytest.param(name, option, kind, str(value), id=f"{name} {option} {value}"[:70]))
    return cases


def time_cases() -> list[Any]:
    cases = []
    for name in command_names():
        for option, kind in options_of(name):
            if kind is aware_datetime:
                for value in ("9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+00:00", "1000-01-01T00:30:00+01:00"):
                    cases.append(pytest.param(name, option, value, id=f"{name} {option} {value[:4]}"))
    return cases


def run_from_command_line(name: str, *args: str) -> tuple[int, str, str]:
    """``manage.py <name> <args>`` in this process, as Django runs it from the command line."""
    out, err = io.StringIO(), io.StringIO()
    command = load_command_class("prescient", name)
    command.stdout, command.stderr = OutputWrapper(out), OutputWrapper(err)
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", name, *args])
    return int(exited.value.code or 0), out.getvalue(), err.getvalue()


def test_every_numeric_option_is_found():
    found = {(case.values[0], case.values[1]) for case in number_cases()}
    assert {
        ("prescient_jobs", "--limit"), ("prescient_jobs", "--id"), ("prescient_schedule", "--delay-seconds"),
        ("prescient_backfill", "--delay-seconds"), ("prescient_backfill", "--batch-size"),
        ("prescient_worker", "--concurrency"), ("prescient_worker", "--batch-size"),
        ("prescient_tick", "--batch-size"), ("prescient_prune", "--batch-size"), ("prescient_kill", "--id"),
    } <= found


@pytest.mark.parametrize(("name", "option", "kind", "value"), number_cases())
def test_numeric_option__out_of_range__one_line_naming_option_and_range_exit_1(name, option, kind, value):
    assert kind is not None, f"{name} {option} is a number without a range: give it a Whole(least, most)"
    status, out, err = run_from_command_line(name, option, value)
    assert (status, out) == (1, "")
    assert err.splitlines() == [f"CommandError: argument {option}: must be {kind.allowed}; got {value!r}"]


@pytest.mark.parametrize(("name", "option", "value"), time_cases())
def test_time_option__out_of_range__one_line_naming_option_and_range_exit_1(name, option, value):
    status, out, err = run_from_command_line(name, option, value)
    assert (status, out) == (1, "")
    assert err.splitlines() == [
        f"CommandError: argument {option}: {value!r} is out of range: give a time from 1000-01-01 to 8999-12-31 (UTC)"
    ]


def test_bad_arguments__from_the_command_line__one_line_and_exit_1_not_usage_and_2():
    assert run_from_command_line("prescient_jobs", "--limit", "many") == (
        1, "", "CommandError: argument --limit: must be a whole number from 1 to 2,147,483,647; got 'many'\n"
    )
    assert run_from_command_line("prescient_tick", "--bogus") == (
        1, "", "CommandError: unrecognized arguments: --bogus\n"
    )
    assert run_from_command_line("prescient_kill", "--id", "3") == (
        1, "", "CommandError: the following arguments are required: --reason\n"
    )


def test_help__still_prints_and_exits_0(capsys):
    command = load_command_class("prescient", "prescient_jobs")
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "prescient_jobs", "--help"])
    assert exited.value.code == 0
    assert "--limit" in capsys.readouterr().out


# --- the largest values allowed work -------------------------------------------------------------


@pytest.mark.django_db
def test_largest_values__are_taken_by_the_database(make_job):
    job = make_job()
    out = io.StringIO()
    call_command("prescient_jobs", "--limit", str(2**31 - 1), "--id", str(2**63 - 1), "--id", str(job.pk), stdout=out)
    assert out.getvalue().endswith("1 job(s) shown of 1 selected.\n")
    call_command("prescient_prune", "--batch-size", "100000", stdout=io.StringIO())
    call_command("prescient_tick", "--batch-size", "10000", "--now", LAST_TIME.isoformat(), stdout=io.StringIO())
    assert not FutureJob.objects.exists()  # the tick at the last time ran it


@pytest.mark.django_db
@pytest.mark.parametrize("now", [FIRST_TIME, LAST_TIME])
def test_longest_delay_at_the_first_and_last_time__a_horizon_refusal_not_an_overflow(make_thing, now):
    one = ["--check", "test.record", "--entity", f"testapp.thing:{make_thing().pk}", "--now", now.isoformat()]
    for command, args in [("prescient_schedule", one), ("prescient_backfill", ["testapp.thing", "test.record"])]:
        with pytest.raises(CommandError, match="beyond the horizon"):
            call_command(command, *args, "--delay-seconds", "3153600000", stdout=io.StringIO())
    call_command("prescient_schedule", *one, "--dry-run", stdout=io.StringIO())


# --- the cases of the issue, from the command line ----------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["prescient_jobs", "--limit", str(10**30)],
            f"CommandError: argument --limit: must be a whole number from 1 to 2,147,483,647; got '{10**30}'",
        ),
        (
            ["prescient_schedule", "--check", "test.record", "--entity", "testapp.thing:1",
             "--delay-seconds", str(10**20)],
            (
                "CommandError: argument --delay-seconds: must be a whole number of seconds from 0 to 3,153,600,000 "
                f"(100 years); got '{10**20}'"
            ),
        ),
    ],
)
def test_out_of_range__from_the_command_line__one_line_and_exit_1(args, line):
    process = manage(*args)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out, err.splitlines()) == (1, "", [line])
