"""With ``--json``, a refusal is one JSON object on stdout, ``{"error": "..."}``, and exit status
1, never text (issue #32, item 6): a script that asked for JSON reads JSON whatever happens.

Held in one place, PrescientCommand; tested for every command that has ``--json`` (read from
the parsers: one without a case here fails), with a refusal of its own work and a bad argument.
The commands run as Django runs them from the command line (``run_from_argv``), in this process;
its closing of the connections at the end is left out (it would end the test's transaction).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command, load_command_class
from django.core.management.base import OutputWrapper
from django.db import connections

from prescient.management.commands._args import PrescientCommand
from tests.conftest import manage
from tests.test_docs import command_names

pytestmark = pytest.mark.django_db

#: A refusal of each command's own work: its arguments, the settings it runs with, and what
#: the error says (prescient_status refuses nothing of its own: a bad setting at start).
REFUSALS: dict[str, tuple[list[str], dict[str, Any], str]] = {
    "prescient_jobs": (["--check", "nope"], {}, "Unknown check 'nope'"),
    "prescient_cancel": (["--check", "nope"], {}, "Unknown check 'nope'"),
    "prescient_kill": (["--check", "nope", "--reason", "x"], {}, "Unknown check 'nope'"),
    "prescient_pause": (["--workflow", "nope"], {}, "Unknown workflow 'nope'"),
    "prescient_release": (["--id", "4242"], {}, "No live job with id 4242"),
    "prescient_retry": (["--id", "4242"], {}, "No finished job (history row) with id 4242"),
    "prescient_history": (["--entity", "no.such:1"], {}, "Unknown model 'no.such'"),
    "prescient_token": (["revoke", "--id", "4242"], {}, "No API token with id 4242"),
    "prescient_run_now": ([], {}, "select jobs: give --id, --workflow, --entity, --check or --state"),
    "prescient_sleep": (["--entity", "no.such:1", "--until", "2026-11-22T10:00:00Z"], {}, "Unknown model 'no.such'"),
    "prescient_schedule": (["--check", "nope", "--entity", "testapp.thing:1"], {}, "Unknown check 'nope'"),
    "prescient_schedules": (["--pause", "nope"], {}, "No schedule named 'nope'"),
    "prescient_status": ([], {"SLOT_MINUTES": 7}, "PRESCIENT['SLOT_MINUTES'] must be"),
    # Commands that refuse nothing of their own but a bad setting at start (before any work).
    "prescient_prune": ([], {"SLOT_MINUTES": 7}, "PRESCIENT['SLOT_MINUTES'] must be"),
    "prescient_tick": ([], {"SLOT_MINUTES": 7}, "PRESCIENT['SLOT_MINUTES'] must be"),
    "prescient_reap": ([], {"SLOT_MINUTES": 7}, "PRESCIENT['SLOT_MINUTES'] must be"),
    "prescient_worker": ([], {"SLOT_MINUTES": 7}, "PRESCIENT['SLOT_MINUTES'] must be"),
    "prescient_backfill": (["testapp.Thing", "nope"], {}, "Unknown check 'nope'"),
}


def takes(name: str, option: str) -> bool:
    parser = load_command_class("prescient", name).create_parser("manage.py", name)
    return any(option in action.option_strings for action in parser._actions)


def json_commands() -> list[str]:
    return [name for name in command_names() if takes(name, "--json")]


@pytest.fixture
def command_line(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(connections, "close_all", lambda: None)

    def run(name: str, *args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        command = load_command_class("prescient", name)
        command.stdout, command.stderr = OutputWrapper(out), OutputWrapper(err)
        with pytest.raises(SystemExit) as exited:
            command.run_from_argv(["manage.py", name, *args])
        return int(exited.value.code or 0), out.getvalue(), err.getvalue()

    return run


def the_error(out: str) -> str:
    """The error of the one JSON object ``out`` holds (one line, nothing else)."""
    lines = out.splitlines()
    assert len(lines) == 1, out
    data = json.loads(lines[0])
    assert isinstance(data, dict) and list(data) == ["error"], data
    return str(data["error"])


def test_every_command_with_json_has_a_refusal_here():
    assert json_commands(), "no command with --json found"
    assert sorted(json_commands()) == sorted(REFUSALS)


@pytest.mark.parametrize("name", json_commands())
def test_json__a_refusal_of_the_work__is_one_json_object_on_stdout_and_exit_1(command_line, settings, name):
    args, conf, says = REFUSALS.get(name, ([], {}, ""))
    assert says, f"{name} has --json: give it a refusal in REFUSALS"
    settings.PRESCIENT = {**settings.PRESCIENT, **conf}
    status, out, err = command_line(name, *args, "--json")
    assert (status, err) == (1, ""), out + err
    assert says in the_error(out)


@pytest.mark.parametrize("name", json_commands())
def test_json__a_bad_argument__is_one_json_object_on_stdout_and_exit_1(command_line, name):
    status, out, err = command_line(name, "--json", "--bogus", "1")
    assert (status, err) == (1, "")
    # argparse reports a missing required option before an unknown one (prescient_token takes
    # the "1" for its action)
    assert the_error(out).startswith((
        "unrecognized arguments: --bogus 1", "the following arguments are required", "argument action: invalid choice"
    ))
    if takes(name, "--now"):  # a bad date
        status, out, err = command_line(name, "--now", "yesterday", "--json")
        assert (status, err) == (1, "")
        assert the_error(out) == (
            "argument --now: 'yesterday' is not an ISO 8601 date-time (e.g. 2026-11-22T10:15:00+00:00)"
        )


def test_json__the_option_given_first_or_last_alike(command_line):
    assert command_line("prescient_jobs", "--json", "--limit", "0")[1] == command_line(
        "prescient_jobs", "--limit", "0", "--json"
    )[1]


def test_json__abbreviated_as_argparse_allows__still_json(command_line):
    status, out, err = command_line("prescient_jobs", "--check", "nope", "--js")
    assert (status, err) == (1, "")
    assert the_error(out).startswith("Unknown check 'nope'")


def test_without_json__the_refusal_is_one_line_on_stderr(command_line):
    status, out, err = command_line("prescient_jobs", "--check", "nope")
    assert (status, out) == (1, "")
    assert err.startswith("CommandError: Unknown check 'nope'") and err.count("\n") == 1


def test_a_command_without_json__refuses_the_option_in_text(monkeypatch):
    # Every prescient command has --json now (issue #35): a command of the same base without it.
    class Plain(PrescientCommand):
        def handle(self, *args: Any, **options: Any) -> None:
            raise AssertionError("not reached")

    out, err = io.StringIO(), io.StringIO()
    command = Plain(stdout=out, stderr=err)
    monkeypatch.setattr(connections, "close_all", lambda: None)
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "plain", "--json"])
    assert (exited.value.code, out.getvalue(), err.getvalue()) == (
        1, "", "CommandError: unrecognized arguments: --json\n"
    )


def test_call_command__with_json_still_raises_command_error():
    with pytest.raises(CommandError, match="Unknown check 'nope'"):
        call_command("prescient_jobs", check="nope", json=True)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_json__from_the_command_line__stdout_is_the_json_object_alone():
    process = manage("prescient_cancel", "--workflow", "nope", "--json")
    out, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (1, "")
    assert the_error(out).startswith("Unknown workflow 'nope'")
