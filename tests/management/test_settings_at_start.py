"""Every PRESCIENT setting has a range that works (issue #28, item 3): the commands that run
checks refuse a bad one at start, ``--skip-checks`` or not, before anything is claimed; and a
tick caps its own memory with CHILD_MEMORY_MB as a worker caps its children."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError, call_command

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.conftest import manage

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("TIMEOUT_SECONDS", -1, "a number more than 0"),
        ("WORKER_HEARTBEAT_SECONDS", 0, "a number from 0.5"),
        ("CHILD_MEMORY_MB", 64, "a whole number from 256"),
        ("SLOT_MINUTES", 7, ".*divides a day"),
    ],
)
@pytest.mark.parametrize("command", ["prescient_tick", "prescient_worker"])
def test_command__bad_setting_with_skip_checks__stops_at_start_and_claims_nothing(
    settings, make_thing, t0, command, key, value, allowed
):
    prescient.schedule(make_thing(), "test.record", now=t0)
    settings.PRESCIENT = {**settings.PRESCIENT, key: value}
    args = ["--now", t0.isoformat()] if command == "prescient_tick" else ["--once", "--concurrency", "1"]
    with pytest.raises(CommandError, match=rf"PRESCIENT\['{key}'\] must be {allowed}.*; got {value!r}$"):
        call_command(command, *args, skip_checks=True)
    job = FutureJob.objects.get()
    assert (job.state, job.reserved_by) == (State.SCHEDULED, "")
    assert not JobHistory.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_tick_command__bad_setting_from_the_command_line__one_line_and_exit_status_1(monkeypatch, make_thing, t0):
    prescient.schedule(make_thing(), "test.record", now=t0)
    monkeypatch.setenv("PRESCIENT_TEST_SETTINGS", json.dumps({"TIMEOUT_SECONDS": -1}))
    process = manage("prescient_tick", "--skip-checks", "--now", t0.isoformat())
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, out + err
    assert err.strip().splitlines() == [
        "CommandError: PRESCIENT['TIMEOUT_SECONDS'] must be a number more than 0 to 604,800; got -1"
    ]
    assert FutureJob.objects.get().reserved_by == ""


# --- an error handler that cannot be used (issue #32, item 2) ------------------------------------

HANDLERS = [
    ("nowhere.nothing", "cannot be used: No module named 'nowhere'"),
    ("prescient.conf.MAX_SECONDS", "cannot be used: int is not callable"),
    ("tests.testapp.handlers.no_such_handler", 'does not define a "no_such_handler" attribute'),
]


@pytest.mark.parametrize(("handler", "why"), HANDLERS)
@pytest.mark.parametrize("command", ["prescient_tick", "prescient_worker"])
def test_command__error_handler_that_cannot_be_used_with_skip_checks__stops_at_start(
    settings, make_thing, t0, command, handler, why
):
    """Refused before anything is claimed: otherwise every failed run would fail again in the
    handler, and the job loop, uncharged."""
    prescient.schedule(make_thing(), "fault.bad", now=t0)
    settings.PRESCIENT = {**settings.PRESCIENT, "ERROR_HANDLER": handler}
    args = ["--now", t0.isoformat()] if command == "prescient_tick" else ["--once", "--concurrency", "1"]
    with pytest.raises(CommandError, match=rf"^PRESCIENT\['ERROR_HANDLER'\] '{re.escape(handler)}' .*{re.escape(why)}"):
        call_command(command, *args, skip_checks=True)
    job = FutureJob.objects.get()
    assert (job.state, job.reserved_by, job.run_count) == (State.SCHEDULED, "", 0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", ["prescient_tick", "prescient_worker"])
def test_command__unimportable_error_handler_from_the_command_line__one_line_and_exit_status_1(
    monkeypatch, make_thing, t0, command
):
    prescient.schedule(make_thing(), "fault.bad", now=t0)
    monkeypatch.setenv("PRESCIENT_TEST_SETTINGS", json.dumps({"ERROR_HANDLER": "nowhere.nothing"}))
    args = ["--now", t0.isoformat()] if command == "prescient_tick" else ["--once", "--concurrency", "1"]
    process = manage(command, "--skip-checks", *args)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, out + err
    assert out == ""
    refusal = (
        "CommandError: PRESCIENT['ERROR_HANDLER'] 'nowhere.nothing' cannot be used: No module named 'nowhere'; "
        "give the dotted path of a callable(job, check, now)"
    )
    assert err.strip().splitlines() == [refusal]
    assert FutureJob.objects.get().run_count == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_tick_command__honours_child_memory_mb(monkeypatch, make_thing, t0):
    """The smallest cap allowed (256 MB) lets a tick start and run a small check; a check that
    allocates 1 GB under it is a failed run (MemoryError) and the tick goes on."""
    small = prescient.schedule(make_thing(name="1"), "fault.allocate", now=t0)
    large = prescient.schedule(make_thing(name="1024"), "fault.allocate", now=t0)
    monkeypatch.setenv("PRESCIENT_TEST_SETTINGS", json.dumps({"CHILD_MEMORY_MB": 256}))
    process = manage("prescient_tick", "--now", t0.isoformat())
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, out + err
    assert JobHistory.objects.get(job_id=small.pk).outcome == Outcome.COMPLETED
    failed = JobHistory.objects.get(job_id=large.pk)
    assert failed.outcome == Outcome.FAILED
    assert "MemoryError" in failed.last_error


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker__starts_its_children_at_the_smallest_memory_cap(monkeypatch, make_thing, t0):
    job = prescient.schedule(make_thing(name="1"), "fault.allocate", now=t0)
    monkeypatch.setenv("PRESCIENT_TEST_SETTINGS", json.dumps({"CHILD_MEMORY_MB": 256}))
    process = manage("prescient_worker", "--once", "--concurrency", "1")
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, out + err
    assert JobHistory.objects.get(job_id=job.pk).outcome == Outcome.COMPLETED
