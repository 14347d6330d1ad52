"""A check stuck inside a database query is stopped by the timeout too, and the tick goes on."""

import time

import pytest
from django.db import connection

import prescient
from prescient.models import FutureJob

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.postgres]


def test_timeout__interrupts_a_long_query_and_the_connection_recovers(make_thing, register, t0):
    def stuck_in_query(thing, job):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(30)")

    register("test.pgsleep", stuck_in_query, timeout_seconds=0.5)
    register("test.fine", lambda thing, job: None)
    prescient.schedule(make_thing(), "test.pgsleep", now=t0)
    prescient.schedule(make_thing(), "test.fine", now=t0)
    started = time.monotonic()
    summary = prescient.tick(t0)
    assert time.monotonic() - started < 10
    assert summary.counts["completed"] == 1 and summary.counts["retried"] == 1
    job = FutureJob.objects.get()
    assert job.job_exec == "test.pgsleep"
    assert job.last_error.startswith("CheckTimeout:")
    assert job.state == "scheduled"
    # The query was cancelled on the server, not left running behind a dropped connection.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(30)%%' AND state = 'active'"
        )
        assert cursor.fetchone()[0] == 0
