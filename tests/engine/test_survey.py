"""The survey (prescient.engine.sweep.survey): the idle tick's one query, answered by its indexes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from prescient.engine import sweep
from prescient.models import FutureJob, Schedule
from prescient.states import State
from tests.conftest import on_postgres

pytestmark = pytest.mark.django_db

sqlite_only = pytest.mark.skipif(on_postgres(), reason="SQLite only")


def plan(sql: str, params: list[object]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return [row[-1] for row in cursor.fetchall()]


@sqlite_only
def test_on_sqlite__each_question_is_answered_by_a_covering_index(t0):
    sql, params = sweep._local_survey_statement(connection, t0, t0 - timedelta(minutes=2))
    searches = [step for step in plan(sql, params) if step.startswith("SEARCH")]
    assert searches == [
        "SEARCH prescient_futurejob USING COVERING INDEX prescient_job_due (next_check_at<?)",
        "SEARCH prescient_futurejob USING COVERING INDEX prescient_job_in_flight (reserved_at<?)",
        "SEARCH prescient_schedule USING COVERING INDEX prescient_schedule_due (due_at<?)",
    ]


@sqlite_only
def test_on_sqlite__only_the_times_are_parameters(t0):
    # A parameter compared with a partial index's condition (state = %s) makes SQLite plan the
    # statement again at every run: the constants are in its text.
    sql, params = sweep._local_survey_statement(connection, t0, t0 - timedelta(minutes=2))
    assert sql.count("%s") == len(params) == 3
    assert f"= '{State.SCHEDULED.value}'" in sql


def test_the_survey__sees_a_due_job_a_stale_claim_and_a_due_schedule(make_job, t0):
    assert sweep.survey(t0)[:2] == (False, False)
    job = make_job(next_check_at=t0 + timedelta(minutes=5))
    assert not sweep.survey(t0).due
    assert sweep.survey(t0 + timedelta(minutes=5)).due  # due at its time, not only after
    FutureJob.objects.filter(pk=job.pk).update(
        state=State.RUNNING, reserved_by="tick:1", reserved_at=t0 - timedelta(days=1)
    )
    found = sweep.survey(t0 + timedelta(minutes=5))
    assert found.stale and not found.due
    assert not found.recurring and not Schedule.objects.exists()


def test_the_survey__compiled_once__still_takes_each_calls_times(make_job, t0):
    make_job(next_check_at=t0)
    assert sweep.survey(t0 - timedelta(seconds=1)).due is False  # compiled here, then reused
    assert sweep.survey(t0).due is True
    assert sweep.survey(t0 - timedelta(seconds=1)).due is False


def test_the_survey__gives_the_same_answer_whether_django_logs_its_query_or_not(make_job, t0):
    from django.test.utils import CaptureQueriesContext

    make_job(next_check_at=t0)
    quiet = sweep.survey(t0)  # on SQLite: sqlite3's own cursor, the ? form made once
    with CaptureQueriesContext(connection) as logged:
        seen = sweep.survey(t0)
    assert len(logged) == 1  # the query log sees it as one query
    assert seen[:2] == quiet[:2] == (True, False) and seen.recurring is quiet.recurring is False
