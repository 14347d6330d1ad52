"""Health per check (#35 item 2, :mod:`prescient.health`): runs per minute, failure rate, run
duration p50/p95 and last error from the history of the window; pending and oldest overdue from the
live table. Rows are written straight into both tables, at explicit times; the percentiles agree
on PostgreSQL (``percentile_cont``) and elsewhere (Python over a sample)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from prescient import health as health_module
from prescient.health import health, percentile_cont
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.conftest import T0

pytestmark = pytest.mark.django_db

M = timedelta(minutes=1)
#: The window is read as of then: the hour before it is 11:00 to 12:00.
NOW = T0 + 2 * timedelta(hours=1)


def finished(check: str, at: datetime, outcome: str = Outcome.COMPLETED, *, runs: int = 1, seconds: float = 1.0,
             failures: int = 0, error: str = "", exception: str = "", key: str = "1") -> JobHistory:
    return JobHistory.objects.create(
        job_id=1, entity_name="testapp.thing", entity_key=key, job_exec=check, outcome=outcome, run_count=runs,
        failure_count=failures, total_run_seconds=seconds, first_check_at=at - M, created_at=at - M,
        finished_at=at, last_error=error, exception_class_path=exception,
    )


def pending(check: str, key: str, next_check_at: datetime, state: str = State.SCHEDULED) -> FutureJob:
    return FutureJob.objects.create(
        entity_name="testapp.thing", entity_key=key, job_exec=check, state=state, first_check_at=next_check_at,
        next_check_at=next_check_at, created_at=next_check_at - M,
    )


@pytest.fixture
def hour() -> dict[str, Any]:
    """In the hour before NOW: ``test.ship`` finished 4 jobs (6 runs, 1 failed run retried, one
    job failed), run times per run 1, 2, 3 and 4 s; ``test.bill`` has only pending jobs, one 30
    minutes overdue; older rows and a row of another check before the window are left out."""
    finished("test.ship", NOW - 50 * M, seconds=1.0)
    finished("test.ship", NOW - 40 * M, runs=2, seconds=4.0, failures=1, error="ValueError: first try",
             exception="builtins.ValueError")  # completed on its retry, the error kept
    finished("test.ship", NOW - 30 * M, seconds=3.0)
    last = finished("test.ship", NOW - 10 * M, Outcome.FAILED, runs=2, seconds=8.0, failures=2,
                    error="TimeoutError: carrier down\nTraceback ...", exception="builtins.TimeoutError", key="7")
    finished("test.ship", NOW - 61 * M, Outcome.FAILED, runs=5, seconds=50.0, failures=5, error="too old")
    finished("test.old", NOW - 2 * timedelta(hours=1))
    pending("test.ship", "1", NOW + 10 * M)
    pending("test.bill", "1", NOW - 30 * M)
    pending("test.bill", "2", NOW - 5 * M)
    pending("test.bill", "3", NOW - 50 * M, state=State.PAUSED)  # paused: pending, not due
    return {"last": last}


def test_percentile_cont__interpolates_as_postgresql():
    assert percentile_cont([], 0.5) is None
    assert percentile_cont([7.0], 0.95) == 7.0
    assert percentile_cont([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert percentile_cont([1.0, 2.0, 3.0, 4.0], 0.95) == pytest.approx(3.85)
    assert percentile_cont([float(n) for n in range(1, 101)], 0.5) == 50.5


def test_an_hour__per_check_runs_failures_percentiles_last_error_pending_overdue(hour):
    report = health(NOW)
    assert (report.minutes, report.since, report.until) == (60, (NOW - 60 * M).isoformat(), NOW.isoformat())
    assert [check.name for check in report.checks] == ["test.bill", "test.ship"]
    bill, ship = report.checks
    assert (ship.finished, ship.failed, ship.runs, ship.failed_runs) == (4, 1, 6, 3)
    assert ship.runs_per_minute == 0.1
    assert ship.failure_rate == 0.5
    assert (ship.run_seconds_p50, ship.run_seconds_p95) == (2.5, 3.85)
    assert ship.last_error is not None
    assert ship.last_error.history_id == hour["last"].pk
    assert ship.last_error.error == "TimeoutError: carrier down\nTraceback ..."
    assert (ship.last_error.exception_class, ship.last_error.outcome) == ("builtins.TimeoutError", "failed")
    assert (ship.last_error.entity_name, ship.last_error.entity_key) == ("testapp.thing", "7")
    assert (ship.pending, ship.due, ship.oldest_overdue_seconds) == (1, 0, None)
    assert (bill.finished, bill.runs, bill.failure_rate, bill.run_seconds_p50) == (0, 0, None, None)
    assert bill.last_error is None
    assert (bill.pending, bill.due, bill.oldest_overdue_seconds) == (3, 2, 1800.0)


def test_a_longer_window_takes_the_older_rows(hour):
    ship = {check.name: check for check in health(NOW, minutes=90).checks}["test.ship"]
    assert (ship.finished, ship.runs, ship.failed_runs) == (5, 11, 8)
    assert ship.runs_per_minute == round(11 / 90, 3)


def test_names__only_those_checks(hour):
    assert [check.name for check in health(NOW, names=["test.bill", "test.nothing"]).checks] == ["test.bill"]
    assert health(NOW, names=[]).checks == []


def test_nothing_anywhere__no_check(db):
    assert health(NOW).checks == []


@pytest.mark.parametrize("minutes", [0, -1, 7 * 24 * 60 + 1])
def test_a_window_out_of_range__refused(db, minutes):
    with pytest.raises(ValueError, match="from 1 to 10080"):
        health(NOW, minutes=minutes)


def test_a_fixed_number_of_queries_whatever_the_checks(hour, django_assert_max_num_queries):
    for n in range(20):
        finished(f"test.many{n}", NOW - M, error="boom")
        pending(f"test.many{n}", "1", NOW - M)
    with django_assert_max_num_queries(4):
        assert len(health(NOW).checks) == 22


def test_the_sample_bounds_the_rows_read_for_percentiles(hour, monkeypatch):
    """Only each check's latest SAMPLE jobs count, on every database (PostgreSQL counted all of
    the window's: 600,000 jobs sorted in an hour of a hundred million rows a week)."""
    assert {check.name: check for check in health(NOW).checks}["test.ship"].run_seconds_p50 == 2.5  # all four
    monkeypatch.setattr(health_module, "SAMPLE", 2)
    ship = {check.name: check for check in health(NOW).checks}["test.ship"]
    assert (ship.run_seconds_p50, ship.run_seconds_p95) == (3.5, 3.95)  # of 3 s and 4 s per run
