"""``prescient.recheck()`` (issue #34, item 5): writes no save sees (``bulk_update()``, raw SQL,
a related row) end nothing until the next rung; recheck judges met now, as a save would have.
And ``expect()`` reads the database's state for a Q and a callable alike (it read the instance
in memory for a callable)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from tests.conftest import T0
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)


def test_recheck__a_queryset_after_bulk_update_ends_the_met_and_keeps_the_rest(declare, make_thing):
    calls = declare()
    shipped, waiting, unwatched = make_thing(), make_thing(), make_thing()
    for thing in (shipped, waiting):
        prescient.expect(thing, "test.expect", now=T0)
    shipped.status = "shipped"
    Thing.objects.bulk_update([shipped], ["status"])  # no save signal
    assert FutureJob.objects.count() == 2
    assert prescient.recheck(Thing.objects.all(), now=T0 + H) == 1
    assert list(FutureJob.objects.values_list("entity_key", flat=True)) == [str(waiting.pk)]
    row = JobHistory.objects.get(entity_key=str(shipped.pk))
    assert row.outcome == Outcome.MET and row.payload["met_at"] == (T0 + H).isoformat()
    assert calls == [] and unwatched.pk  # nothing called, nothing else touched


def test_recheck__instances_after_raw_sql(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Thing._meta.db_table} SET status = %s WHERE id = %s", ["shipped", thing.pk])
    assert FutureJob.objects.exists()
    assert prescient.recheck([thing], now=T0 + H) == 1  # the Q asks the row, not the instance
    assert not FutureJob.objects.exists()


def test_recheck__with_nothing_pending_costs_one_query(declare, make_thing):
    declare()
    for _ in range(3):
        make_thing(status="shipped")
    with CaptureQueriesContext(connection) as captured:
        assert prescient.recheck(Thing.objects.all()) == 0
    assert len(captured.captured_queries) == 1


def test_recheck__a_model_without_expectations_asks_nothing(make_thing):
    with CaptureQueriesContext(connection) as captured:
        assert prescient.recheck([make_thing()]) == 0
    assert not [q for q in captured.captured_queries if "prescient" in q["sql"]]


def test_expect__a_callable_met_reads_the_row_as_the_database_has_it(declare, make_thing):
    declare("test.callable", met=lambda thing: thing.status == "shipped")
    thing = make_thing()
    thing.status = "shipped"  # in memory only: not saved
    assert prescient.expect(thing, "test.callable", now=T0) is not None  # the row is not shipped
    other = make_thing(status="shipped")
    other.status = "new"  # in memory only: the row is shipped
    assert prescient.expect(other, "test.callable", now=T0) is None
