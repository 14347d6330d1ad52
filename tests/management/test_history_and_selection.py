"""prescient_history lists finished jobs, selected as prescient_retry selects them; a selection
that matches nothing says so on stderr, and with --strict is the command's error (issue #35,
item 6); "No live job with id N" points at prescient_history."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command, load_command_class

from prescient.models import JobHistory
from tests.test_docs import command_names

pytestmark = pytest.mark.django_db

T0_ISO = "2026-11-22T10:00:00+00:00"


def run(*args, verbosity=1):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, verbosity=verbosity)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def rows(t0):
    """Three finished jobs: a failed one with a TimeoutError, a completed one, a killed one."""
    def row(job_id, outcome, minutes, key, **fields):
        return JobHistory.objects.create(
            job_id=job_id, entity_name="testapp.thing", entity_key=key, job_exec=fields.pop("check", "test.record"),
            outcome=outcome, first_check_at=t0, created_at=t0 - timedelta(hours=1),
            finished_at=t0 + timedelta(minutes=minutes), **fields,
        )

    return [
        row(11, "failed", 1, "1", last_error="TimeoutError: the carrier did not answer\nmore detail",
            exception_class_path="builtins.TimeoutError", run_count=3, failure_count=3, check_count=3),
        row(12, "completed", 2, "2", check="test.other", workflow="order-2", run_count=1, check_count=1),
        row(13, "killed", 3, "1", reason="customer left"),
    ]


# --- prescient_history ------------------------------------------------------------------------


def test_history__lists_the_newest_first_with_their_errors_and_a_count(rows):
    failed, completed, killed = rows
    out, err = run("prescient_history")
    assert err == ""
    assert out.splitlines() == [
        (f"{killed.pk}  2026-11-22T10:03:00+00:00  killed         test.record  testapp.thing:1  job=13 checks=0 "
        "runs=0 failures=0"),
        "    reason: customer left",
        (f"{completed.pk}  2026-11-22T10:02:00+00:00  completed      test.other  testapp.thing:2  job=12 checks=1 "
        "runs=1 failures=0 workflow=order-2"),
        (f"{failed.pk}  2026-11-22T10:01:00+00:00  failed         test.record  testapp.thing:1  job=11 checks=3 "
        "runs=3 failures=3"),
        "    error: TimeoutError: the carrier did not answer",
        "3 finished job(s) shown of 3 selected.",
    ]


@pytest.mark.parametrize(
    ("args", "jobs"),
    [
        (["--check", "test.record"], [13, 11]),
        (["--outcome", "failed"], [11]),
        (["--entity", "testapp.thing:1"], [13, 11]),
        (["--workflow", "order-2"], [12]),
        (["--since", "2026-11-22T10:02:00Z"], [13, 12]),
        (["--error", "timeouterror"], [11]),
        (["--error", "builtins.Timeout"], [11]),
        (["--error", "carrier did"], [11]),
        (["--job-id", "12"], [12]),
        (["--check", "test.record", "--outcome", "killed"], [13]),
        (["--limit", "1"], [13]),
    ],
)
def test_history__filters_combine_as_retrys_do(rows, args, jobs):
    data = json.loads(run("prescient_history", *args, "--json")[0])
    assert [row["job_id"] for row in data["rows"]] == jobs
    assert data["shown"] == len(jobs)


def test_history_json__one_object_with_every_field_and_the_whole_error(rows):
    out, _ = run("prescient_history", "--outcome", "failed", "--json")
    data = json.loads(out)
    assert out.count("\n") == 1 and (data["shown"], data["selected"]) == (1, 1)
    assert data["rows"][0] == {
        "id": rows[0].pk, "job_id": 11, "kind": "check", "check": "test.record", "entity": "testapp.thing:1",
        "workflow": "", "outcome": "failed", "created_at": "2026-11-22T09:00:00+00:00",
        "finished_at": "2026-11-22T10:01:00+00:00", "check_count": 3, "run_count": 3, "failure_count": 3,
        "total_run_seconds": 0.0, "last_error": "TimeoutError: the carrier did not answer\nmore detail",
        "exception_class": "builtins.TimeoutError", "reason": "", "rerun_of": None,
    }
    limited = json.loads(run("prescient_history", "--limit", "2", "--json")[0])
    assert (limited["shown"], limited["selected"]) == (2, 3)


def test_history__a_long_error_is_cut_on_its_line(rows):
    JobHistory.objects.filter(pk=rows[0].pk).update(last_error="E" * 500)
    line = run("prescient_history", "--outcome", "failed")[0].splitlines()[1]
    assert line == "    error: " + "E" * 119 + "…"


def test_history__bad_selections_are_command_errors(rows):
    with pytest.raises(CommandError, match=re.escape("No finished job (history row) with id 999")):
        run("prescient_history", "--id", "999")
    with pytest.raises(CommandError, match="--error needs some text"):
        run("prescient_history", "--error", "  ")
    with pytest.raises(CommandError, match="Unknown model 'no.such'"):
        run("prescient_history", "--entity", "no.such:1")


def test_a_live_job_not_found__points_at_prescient_history(db):
    with pytest.raises(CommandError) as caught:
        run("prescient_pause", "--id", "4242")
    assert str(caught.value) == (
        "No live job with id 4242; it may have finished: see python manage.py prescient_history --job-id 4242"
    )


def test_prescient_retry__selects_with_the_new_options_too(rows, register):
    data = json.loads(run("prescient_retry", "--error", "carrier", "--dry-run", "--json")[0])
    assert [row["id"] for row in data["rows"]] == [rows[0].pk]
    data = json.loads(run("prescient_retry", "--job-id", "13", "--dry-run", "--json")[0])
    assert [row["id"] for row in data["rows"]] == [rows[2].pk]


# --- an empty selection -------------------------------------------------------------------------


def selecting_commands() -> list[str]:
    return [
        name for name in command_names()
        if any("--strict" in action.option_strings
               for action in load_command_class("prescient", name).create_parser("manage.py", name)._actions)
    ]


def test_every_selecting_verb_takes_strict():
    assert selecting_commands() == [
        "prescient_cancel", "prescient_history", "prescient_jobs", "prescient_kill", "prescient_pause",
        "prescient_release", "prescient_retry", "prescient_run_now", "prescient_sleep",
    ]


#: Each selecting command with a selection that matches nothing, and what it says.
EMPTY = {
    "prescient_cancel": (["--check", "test.record", "--state", "buried"],
                         "No live job matches --check test.record --state buried: nothing to cancel."),
    "prescient_kill": (["--check", "test.record", "--reason", "x"],
                       "No live job matches --check test.record: nothing to kill."),
    "prescient_pause": (["--check", "test.record"], "No live job matches --check test.record: nothing to pause."),
    "prescient_release": (["--entity", "testapp.thing:99"],
                          "No live job matches --entity testapp.thing:99: nothing to release."),
    "prescient_run_now": (["--state", "waiting"], "No live job matches --state waiting: nothing to run now."),
    "prescient_sleep": (["--check", "test.record", "--until", T0_ISO],
                        "No live job matches --check test.record: nothing to sleep."),
    "prescient_jobs": (["--state", "paused"], "No live job matches --state paused."),
    "prescient_history": (["--check", "test.record", "--outcome", "missed"],
                          "No finished job matches --check test.record --outcome missed."),
    "prescient_retry": (["--error", "no such thing"],
                        "No finished job matches --error 'no such thing': nothing to run again."),
}


def test_every_selecting_command_has_an_empty_case_here():
    assert sorted(EMPTY) == selecting_commands()


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_selection__says_so_on_stderr_and_exits_0(name, rows):
    args, says = EMPTY[name]
    out, err = run(name, *args)
    assert err == says + "\n"
    assert out.splitlines()[-1].endswith("0 selected.")  # the summary line, as before
    assert run(name, *args, verbosity=0)[1] == ""  # -v 0: no note


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_selection__with_strict_is_the_commands_error(name, rows):
    args, says = EMPTY[name]
    with pytest.raises(CommandError) as caught:
        run(name, *args, "--strict")
    assert str(caught.value) == says


def test_empty_selection__json_keeps_stdout_one_object_and_says_so_on_stderr(rows):
    out, err = run("prescient_cancel", "--entity", "testapp.thing:99", "--json")
    assert json.loads(out)["jobs"] == [] and err.startswith("No live job matches --entity testapp.thing:99")


def test_empty_selection__a_dry_run_says_so_too(rows):
    out, err = run("prescient_kill", "--check", "test.record", "--reason", "x", "--dry-run")
    assert err == "No live job matches --check test.record: nothing to kill.\n"
    assert out == "Would kill 0 job(s); 0 unchanged; 0 refused; 0 selected.\n"


def test_a_selection_that_matches__is_unchanged_by_strict(make_job):
    job = make_job()
    out, err = run("prescient_pause", "--check", "test.record", "--strict")
    assert err == "" and out.splitlines()[-1] == "Paused 1 job(s); 0 unchanged; 0 refused; 1 selected."
    assert run("prescient_jobs", "--id", str(job.pk), "--strict")[0].endswith("1 job(s) shown of 1 selected.\n")


def test_empty_listing_without_filters__says_no_filter_was_given(db):
    assert run("prescient_jobs")[1] == "No live job matches (no filter given).\n"
    assert run("prescient_history")[1] == "No finished job matches (no filter given).\n"
