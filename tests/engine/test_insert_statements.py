"""A new job costs one statement: schedule(), schedule_many() and enqueue() (issue #25 item 4).

Counted with CaptureQueriesContext, which sees every statement Django sends, transaction control
(BEGIN, SAVEPOINT, RELEASE, COMMIT) included. The wake-up of idle workers rides in the same
statement on PostgreSQL; nothing else is sent: no savepoint, no read-back, no separate NOTIFY.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import prescient
from prescient.models import FutureJob
from tests.testapp.models import Thing


def statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries]


def wakes(sql: str) -> bool:
    return "pg_notify" in sql


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("minutes", [-20, 60], ids=["due-now", "later"])
def test_schedule__a_new_job_is_one_statement_in_autocommit_mode(make_thing, minutes):
    thing = make_thing()
    with CaptureQueriesContext(connection) as queries:
        job = prescient.schedule(thing, "test.record", at=timezone.now() + timedelta(minutes=minutes))
    [sql] = statements(queries)
    assert sql.lstrip().upper().startswith(("INSERT", "WITH"))
    assert wakes(sql) == (connection.vendor == "postgresql" and minutes < 0)
    assert FutureJob.objects.get(pk=job.pk).entity_key == str(thing.pk)


@pytest.mark.django_db
def test_schedule__a_new_job_is_one_statement_in_the_callers_transaction(make_thing, t0):
    thing = make_thing()
    with CaptureQueriesContext(connection) as queries:
        prescient.schedule(thing, "test.record", now=t0)
    assert len(statements(queries)) == 1, statements(queries)


@pytest.mark.django_db
def test_schedule__a_pending_job_is_read_back_once(make_thing, t0):
    """The duplicate case: the INSERT writes nothing, one SELECT reads the pending job."""
    thing = make_thing()
    first = prescient.schedule(thing, "test.record", now=t0)
    with CaptureQueriesContext(connection) as queries:
        again = prescient.schedule(thing, "test.record", delay=timedelta(hours=2), now=t0)
    assert again.pk == first.pk
    assert len(statements(queries)) == 2, statements(queries)


@pytest.mark.django_db(transaction=True)
def test_schedule_many__a_batch_is_one_statement_the_wake_up_in_it():
    things = Thing.objects.bulk_create([Thing() for _ in range(5)])
    due = timezone.now() - timedelta(minutes=20)
    with CaptureQueriesContext(connection) as queries:
        created = prescient.schedule_many(things, "test.record", at=due, batch_size=3)
    assert created == 5
    sent = statements(queries)
    assert len(sent) == 2, sent  # two batches, no BEGIN/COMMIT around them, no separate NOTIFY
    assert all(wakes(sql) for sql in sent) == (connection.vendor == "postgresql")


@pytest.mark.django_db(transaction=True)
def test_enqueue__is_one_statement_in_autocommit_mode_and_in_a_transaction():
    pytest.importorskip("django.tasks")
    from tests.tasksapp import tasks

    with CaptureQueriesContext(connection) as queries:
        tasks.add.enqueue(1, 2)
    [sql] = statements(queries)
    assert wakes(sql) == (connection.vendor == "postgresql")
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            result = tasks.add.enqueue(3, 4)
        [sql] = statements(queries)  # no SAVEPOINT/RELEASE: a task's key is new, it cannot clash
        assert wakes(sql) == (connection.vendor == "postgresql")
    assert FutureJob.objects.filter(pk=int(result.id)).exists()
