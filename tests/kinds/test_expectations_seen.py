"""Expectations seen everywhere: history outcomes, the admin's ladder and filters, the dashboard's
SLA chart, the JSON API, ``prescient_status`` and the metrics."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

import prescient
from prescient.status import snapshot
from tests.api.test_views import Api, make_token, make_user
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)


@pytest.fixture
def climbed(declare):
    """Three things an hour ago: one met at save, one missed (a one-rung ladder), one pending."""
    declare("test.expect", ladder=[H])
    now = timezone.now()
    start = now - 2 * H
    met, missed, waiting = (Thing.objects.create(name=n) for n in ("met", "missed", "waiting"))
    for thing in (met, missed):
        prescient.expect(thing, "test.expect", start=start, now=start)
    prescient.expect(waiting, "test.expect", now=now)
    met.status = "shipped"
    met.save()
    prescient.tick(now)
    return met, missed, waiting


def test_admin__the_ladder_in_the_entity_cell_and_history_filtered_by_outcome(admin_client, climbed):
    met, missed, _waiting = climbed
    jobs = admin_client.get("/admin/prescient/futurejob/").content.decode()
    assert "rung 0 of 1 reached; next" in jobs
    history = admin_client.get("/admin/prescient/jobhistory/", {"outcome__exact": "missed"}).content.decode()
    assert "missed: the one rung reached" in history and f"testapp.thing:{missed.pk}" in history  # #34: "all 1 rungs"
    assert f"testapp.thing:{met.pk}" not in history
    history = admin_client.get("/admin/prescient/jobhistory/", {"outcome__exact": "met"}).content.decode()
    assert "met at " in history and f"testapp.thing:{met.pk}" in history


def test_dashboard__met_and_missed_per_slot(admin_client, climbed):
    content = admin_client.get("/admin/prescient/futurejob/dashboard/").content.decode()
    assert 'id="prescient-chart-sla"' in content
    assert "Expectations in the past 7 days" in content


def test_api__lists_expectations_with_their_counts(climbed):
    api = Api(make_token(make_user()))
    response = api.get("expectations")
    assert response.status_code == 200, response.content
    [entry] = [e for e in response.json() if e["name"] == "test.expect"]
    assert entry == {
        "name": "test.expect", "model": "testapp.thing", "ladder_seconds": [3600.0], "calendar": None,
        "pending": 1, "met": 1, "missed": 1,
    }
    scoped = Api(make_token(make_user("scoped"), checks=["test.record"]))
    assert scoped.get("expectations").json() == []


def test_status__command_and_snapshot(climbed):
    [info] = [e for e in snapshot().expectations if e.name == "test.expect"]
    assert (info.pending, info.met, info.missed) == (1, 1, 1)
    out = StringIO()
    call_command("prescient_status", stdout=out)
    assert "test.expect  model=testapp.thing ladder=[1h] pending=1 met=1 missed=1" in out.getvalue()
    out = StringIO()
    call_command("prescient_status", "--json", stdout=out)
    assert json.loads(out.getvalue())["expectations"][0]["met"] == 1


def test_metrics__met_and_missed_per_expectation(climbed):
    pytest.importorskip("prometheus_client")
    from prescient.api.metrics import exposition

    body = exposition(timezone.now())[0].decode()
    assert 'prescient_expectations_ended{expectation="test.expect",outcome="met",window="24h"} 1.0' in body
    assert 'prescient_expectations_ended{expectation="test.expect",outcome="missed",window="24h"} 1.0' in body
    assert 'prescient_expectations_pending{expectation="test.expect"} 1.0' in body


def test_no_expectation_declared__status_has_none_and_costs_nothing(django_assert_num_queries):
    from prescient.status import expectations

    with django_assert_num_queries(0):
        assert expectations(timezone.now()) == []


def test_dashboard__expectations_cost_five_queries_more(admin_client, declare):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def count() -> int:
        admin_client.get("/admin/prescient/futurejob/dashboard/")  # warm: sessions, content types
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get("/admin/prescient/futurejob/dashboard/").status_code == 200
        return len(queries)

    without = count()
    declare()
    declare("test.expect.too")  # a second costs none more
    assert count() == without + 5  # two for the status's expectations, one for the SLA chart, two for its tables
