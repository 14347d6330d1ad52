"""Nothing a check or task produces can crash the writer (issue: claims you can trust).

Error texts are cleaned (NUL and lone surrogates replaced visibly) and capped; a task's return
value the database would refuse fails that task; a time past the last date is a failed run;
and a row the database still refuses fails its own job while the rest of the batch is written.
Run on SQLite and on PostgreSQL (which refuses NUL and lone surrogates); the same cases with
real workers are in tests/faults/.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

import prescient
from prescient.cleaning import ERROR_LIMIT, clean_text, unstorable
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from tests.conftest import on_postgres

pytestmark = pytest.mark.django_db

BAD_MESSAGES = {
    "nul": ("bad\x00text", "bad\\x00text"),
    "surrogate": ("bad\udc80text", "bad\\udc80text"),
}


# --- the cleaning itself ---------------------------------------------------------------------


def test_clean_text__shows_nul_and_surrogates_and_keeps_the_rest():
    assert clean_text("a\x00b\ud800c é ✓") == "a\\x00b\\ud800c é ✓"
    assert clean_text("plain") == "plain"


def test_clean_text__keeps_the_first_and_last_parts_of_a_long_text():
    text = "HEAD" + "x" * 100_000 + "TAIL"
    cleaned = clean_text(text)
    assert len(cleaned) <= ERROR_LIMIT
    assert cleaned.startswith("HEAD") and cleaned.endswith("TAIL")
    assert "characters cut" in cleaned


def test_unstorable__names_where_the_bad_string_is():
    assert unstorable({"a": [1, "ok", {"b": "x\x00"}]}) .startswith("value['a'][2]['b'] contains a NUL")
    assert "lone surrogate" in unstorable(["\udfff"])
    assert "a key of value" in unstorable({"k\x00": 1})
    assert unstorable({"a": ["fine", 1, None, 2.5]}) == ""


# --- checks ------------------------------------------------------------------------------------


@pytest.fixture
def batch(register, make_thing, t0):
    """99 good checks and one bad one in the same slot; returns (bad job, good jobs)."""

    def make(bad_check):
        register("test.good", lambda thing, job: None)
        register("test.bad", bad_check)
        good = [prescient.schedule(make_thing(name=f"g{i}"), "test.good", now=t0) for i in range(99)]
        bad = prescient.schedule(make_thing(name="bad"), "test.bad", now=t0)
        return bad, good

    return make


@pytest.mark.parametrize("which", BAD_MESSAGES)
def test_a_check_raising_an_unstorable_message__is_a_failed_run_with_the_message_cleaned(batch, t0, which):
    message, shown = BAD_MESSAGES[which]

    def bad(thing, job):
        raise ValueError(message)

    bad_job, good = batch(bad)
    summary = prescient.tick(t0 + timedelta(minutes=15), batch_size=100)
    assert summary.counts[Outcome.COMPLETED] == 99
    assert JobHistory.objects.filter(job_id__in=[j.pk for j in good], outcome=Outcome.COMPLETED).count() == 99
    bad_job.refresh_from_db()  # retried at the next slot
    assert bad_job.failure_count == 1
    assert bad_job.last_error == f"ValueError: {shown}"
    assert bad_job.recent_errors[-1]["error"] == f"ValueError: {shown}"


def test_a_check_raising_a_5_mb_message__keeps_8_kb_of_it(batch, t0, settings):
    settings.PRESCIENT = {"MAX_RETRIES": 0}

    def bad(thing, job):
        raise ValueError("start " + "x" * 5_000_000 + " end")

    bad_job, _ = batch(bad)
    prescient.tick(t0 + timedelta(minutes=15))
    row = JobHistory.objects.get(job_id=bad_job.pk)
    assert row.outcome == Outcome.FAILED
    assert len(row.last_error) <= ERROR_LIMIT
    assert row.last_error.startswith("ValueError: start x") and row.last_error.endswith("x end")
    assert sum(len(entry["error"]) for entry in row.errors) <= ERROR_LIMIT * len(row.errors)


def test_a_check_raising_a_5_mb_message__logs_8_kb_of_it_per_run(batch, t0, settings, caplog):
    """The log line of a raising check is cut as the database cuts the error (#28 item 5): two
    runs of a check raising 5 MB wrote 15 MB of log. The traceback is still there, its first
    and last parts kept. (caplog's handler sits on the root logger: the ``prescient`` logger of
    tests/settings.py propagates to it.)"""
    settings.PRESCIENT = {"MAX_RETRIES": 1}

    def bad(thing, job):
        raise ValueError("start " + "x" * 5_000_000 + " end")

    bad_job, _ = batch(bad)
    with caplog.at_level(logging.INFO, logger="prescient"):
        prescient.tick(t0 + timedelta(minutes=15))
        prescient.tick(t0 + timedelta(minutes=30))
    assert JobHistory.objects.get(job_id=bad_job.pk).run_count == 2
    raised = [r for r in caplog.records if r.getMessage().startswith("check test.bad[")]
    assert len(raised) == 2
    for record in raised:
        line = caplog.handler.format(record)  # what a handler writes, a traceback included
        assert len(line) <= ERROR_LIMIT + 200
        assert "Traceback (most recent call last)" in line and "ValueError: start x" in line
        assert line.endswith("x end") and "characters cut" in line
    assert len(caplog.text) < 64 * 1024


def test_a_check_returning_timedelta_max__is_a_failed_run_not_a_crash(batch, t0):
    bad_job, _ = batch(lambda thing, job: timedelta.max)
    summary = prescient.tick(t0 + timedelta(minutes=15))
    assert summary.counts[Outcome.COMPLETED] == 99
    bad_job.refresh_from_db()
    assert bad_job.failure_count == 1 and bad_job.last_error.startswith("OverflowError:")


def test_a_row_the_database_refuses__fails_its_own_job_and_the_batch_is_written(batch, t0):
    """A check that puts a NUL into its job's payload: PostgreSQL refuses the row (SQLite
    stores it). Either way the 99 other results are written and nothing is run twice."""

    def bad(thing, job):
        job.payload = {"note": "a\x00b"}
        return timedelta(hours=1)

    bad_job, good = batch(bad)
    summary = prescient.tick(t0 + timedelta(minutes=15), batch_size=100)
    assert summary.counts[Outcome.COMPLETED] == 99
    assert not FutureJob.objects.filter(pk__in=[j.pk for j in good]).exists()
    if on_postgres():
        assert summary.counts[Outcome.FAILED] == 1
        row = JobHistory.objects.get(job_id=bad_job.pk)
        assert row.outcome == Outcome.FAILED and row.run_count == 1
        assert "the database refused this run's result" in row.last_error
        assert "\x00" not in row.last_error
    else:
        bad_job.refresh_from_db()
        assert bad_job.check_count == 1 and bad_job.payload == {"note": "a\x00b"}


# --- django.tasks ------------------------------------------------------------------------------


@pytest.fixture
def tasks_module():
    pytest.importorskip("django.tasks")
    from tests.tasksapp import tasks

    return tasks


@pytest.mark.parametrize("which", ["nul", "surrogate"])
def test_a_task_returning_an_unstorable_value__fails_with_a_clear_error(tasks_module, which):
    result = tasks_module.returns_unstorable.enqueue(which)
    other = tasks_module.add.enqueue(1, 2)
    prescient.tick()
    result.refresh()
    other.refresh()
    assert other.return_value == 3
    assert result.status.name == "FAILED"
    error = result.errors[-1]
    assert "cannot store" in error.traceback and "return" in error.traceback


@pytest.mark.parametrize("which", ["nul", "surrogate", "huge"])
def test_a_task_raising_an_unstorable_message__fails_with_the_message_cleaned(tasks_module, which):
    result = tasks_module.raises_unstorable.enqueue(which)
    prescient.tick()
    result.refresh()
    assert result.status.name == "FAILED"
    row = JobHistory.objects.get(job_id=int(result.id))
    assert "\x00" not in row.last_error and len(row.last_error) <= ERROR_LIMIT
    assert len(result.errors[-1].traceback) <= ERROR_LIMIT


def test_enqueue__refuses_unstorable_arguments(tasks_module):
    with pytest.raises(TypeError, match="NUL"):
        tasks_module.echo.enqueue("a\x00b")
    assert not FutureJob.objects.exists()
