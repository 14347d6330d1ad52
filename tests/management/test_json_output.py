"""``--json`` on the commands that had only text (issue #35, item 6): prescient_prune,
prescient_tick, prescient_reap, prescient_backfill and prescient_worker print one JSON object
(the worker: one a line) holding the same facts as their text lines."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command, load_command_class

import prescient
from prescient.engine.decisions import TickSummary
from prescient.management.commands.prescient_worker import interval_fields, interval_line
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.conftest import lose_claims
from tests.test_docs import command_names

pytestmark = pytest.mark.django_db

T0_ISO = "2026-11-22T10:00:00+00:00"


def run(*args, verbosity=1):
    out = StringIO()
    call_command(*args, stdout=out, verbosity=verbosity)
    return out.getvalue()


def one_object(out: str) -> dict:
    lines = out.splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])


def test_every_prescient_command_has_json():
    without = [
        name for name in command_names()
        if not any("--json" in action.option_strings
                   for action in load_command_class("prescient", name).create_parser("manage.py", name)._actions)
    ]
    assert without == []


# --- prescient_prune --------------------------------------------------------------------------


def test_prune_json__per_outcome_what_the_text_says(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"completed": 7, "failed": None, "*": 30}}
    for days in (8, 9, 1):
        JobHistory.objects.create(
            job_id=1, entity_name="testapp.thing", entity_key=str(days), job_exec="test.record",
            outcome="completed", first_check_at=t0, created_at=t0, finished_at=t0 - timedelta(days=days),
        )
    dry = one_object(run("prescient_prune", "--now", T0_ISO, "--dry-run", "--json"))
    assert dry["dry_run"] is True and dry["total"] == 2
    assert dry["outcomes"]["completed"] == {
        "kept_days": 7, "removed": 2, "cutoff": (t0 - timedelta(days=7)).isoformat()
    }
    assert dry["outcomes"]["failed"] == {"kept_days": None, "removed": 0, "cutoff": None}
    assert sorted(dry["outcomes"]) == sorted(Outcome.values)
    assert JobHistory.objects.count() == 3

    done = one_object(run("prescient_prune", "--now", T0_ISO, "--json", verbosity=0))  # JSON at any verbosity
    assert (done["dry_run"], done["total"], done["outcomes"]["completed"]["removed"]) == (False, 2, 2)
    assert JobHistory.objects.count() == 1


# --- prescient_tick ---------------------------------------------------------------------------


def test_tick_json__the_summary_lines_counts(make_thing, t0):
    prescient.schedule(make_thing(), "test.record", now=t0)
    prescient.schedule(make_thing(), "test.record", now=t0, delay=timedelta(hours=2))
    data = one_object(run("prescient_tick", "--now", T0_ISO, "--json"))
    assert data["processed"] == 1 and data["completed"] == 1 and data["rescheduled"] == 0
    assert data["stopped_by"] is None
    # the same keys and numbers as the text line
    summary = TickSummary(Counter(completed=1))
    assert {k: v for k, v in data.items() if k != "stopped_by"} == summary.fields()
    assert summary.line() == "prescient tick: " + " ".join(f"{k}={v}" for k, v in summary.fields().items())


# --- prescient_reap ---------------------------------------------------------------------------


def test_reap_json__how_many_of_each(make_job, clock):
    lost = make_job(state=State.RUNNING, reserved_by="worker:w:1:abc/1/1", reserved_at=clock)
    lose_claims(lost.pk)
    data = one_object(run("prescient_reap", "--now", T0_ISO, "--json"))
    assert data == {"reclaimed": 1, "handed_back": 0, "buried": 0, "slept": 0, "ended": 0}
    assert one_object(run("prescient_reap", "--json")) == dict.fromkeys(data, 0)


# --- prescient_backfill -----------------------------------------------------------------------


def test_backfill_json__counts_and_no_progress_bar(make_thing):
    things = [make_thing() for _ in range(3)]
    prescient.schedule(things[0], "test.record")
    dry = one_object(run("prescient_backfill", "testapp.Thing", "test.record", "--dry-run", "--json"))
    assert dry == {"dry_run": True, "check": "test.record", "matched": 3, "would_schedule": 2, "already_pending": 1}
    out, err = StringIO(), StringIO()
    call_command("prescient_backfill", "testapp.Thing", "test.record", "--json", stdout=out, stderr=err)
    assert one_object(out.getvalue()) == {
        "dry_run": False, "check": "test.record", "matched": 3, "scheduled": 2, "already_pending": 1
    }
    assert err.getvalue() == ""  # no progress bar: stdout and stderr stay machine-readable
    assert FutureJob.objects.count() == 3


# --- prescient_worker: its lines, as text and JSON ---------------------------------------------


def test_worker_interval__counts_runs_outcomes_and_failures():
    done = TickSummary(Counter({"completed": 3, "rescheduled": 8, "failed": 1, "retried": 2}))
    fields = interval_fields(done, 60.2)
    assert fields == {
        "seconds": 60, "runs": 14, "failures": 3,
        "counts": {"completed": 3, "failed": 1, "rescheduled": 8, "retried": 2},
    }
    assert interval_line(fields) == (
        "prescient worker: last 60s: runs=14 failures=3 completed=3 failed=1 rescheduled=8 retried=2"
    )
    assert interval_line(interval_fields(TickSummary(), 61)) == "prescient worker: last 61s: runs=0 failures=0"


def test_worker_command__reports_as_text_or_json_and_not_at_verbosity_0():
    def report(**options):
        out = StringIO()
        command = load_command_class("prescient", "prescient_worker")
        command.stdout = type(command.stdout)(out)
        command.verbosity = options.get("verbosity", 1)
        command.as_json = options.get("json", False)
        command.report(TickSummary(Counter(completed=2)), 60.0)
        return out.getvalue()

    assert report() == "prescient worker: last 60s: runs=2 failures=0 completed=2\n"
    assert report(verbosity=0) == ""
    assert json.loads(report(json=True)) == {
        "event": "interval", "seconds": 60, "runs": 2, "failures": 0, "counts": {"completed": 2}
    }


def test_worker_process__reports_what_was_counted_since_its_last_report_every_report_seconds():
    from prescient.runtime.worker import WorkerProcess

    reports: list[tuple[dict, float]] = []
    worker = WorkerProcess(on_report=lambda done, seconds: reports.append((dict(done.counts), seconds)),
                           report_seconds=60.0, name="test")
    worker._reported_at = 1000.0  # as run() sets it once the worker has started
    worker.summary.counts.update(completed=2, rescheduled=1)
    assert not worker.report_if_due(1059.9)  # not a minute yet: nothing said
    assert worker.report_if_due(1060.0)
    worker.summary.counts.update(failed=1)
    assert not worker.report_if_due(1100.0)
    assert worker.report_if_due(1121.0)
    assert worker.report_if_due(1181.0)  # an idle minute is reported too
    assert reports == [({"completed": 2, "rescheduled": 1}, 60.0), ({"failed": 1}, 61.0), ({}, 60.0)]
