"""``GET expectations/{name}/sla`` (#34 item 9): one expectation's SLA, day by day, with the same
authentication, permissions and token scopes as ``GET expectations``, and ``days`` validated."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from tests.api.test_views import Api, assert_error, make_token, make_user
from tests.kinds.test_expectations_sla import NOW, week  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

PATH = "expectations/test.expect/sla"


@pytest.fixture
def at_now(monkeypatch):
    """The view asks for the real time: give it the fixture's."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def test_the_sla_of_one_expectation(week, at_now):  # noqa: F811
    response = Api(make_token(make_user())).get(PATH, days="2")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "name": "test.expect",
        "ladder_seconds": [3600.0, 7200.0, 10800.0],
        "time_zone": "UTC",
        "since": "2026-11-21T00:00:00Z",
        "until": "2026-11-22T14:00:00Z",
        "days": [
            {"date": "2026-11-22", "met": [1, 1, 1], "missed": 1, "other": 1},
            {"date": "2026-11-21", "met": [1, 0, 0], "missed": 0, "other": 0},
        ],
        "met": [2, 1, 1],
        "missed": 1,
        "other": 1,
        "time_to_met_p50_seconds": 1800.0,
        "time_to_met_p95_seconds": 10800.0,
        "time_to_met_count": 4,
    }


def test_seven_days_by_default(week, at_now):  # noqa: F811
    body = Api(make_token(make_user())).get(PATH).json()
    assert [day["date"] for day in body["days"]] == [f"2026-11-{d}" for d in range(22, 15, -1)]


@pytest.mark.parametrize("days", ["0", "91", "-1", "seven", "1.5", ""])
def test_days_out_of_range_or_not_a_number__is_a_400_naming_days(week, at_now, days):  # noqa: F811
    assert_error(Api(make_token(make_user())).get(PATH, days=days), 400, fields=["days"])


def test_an_unknown_expectation__is_a_404_with_a_suggestion(week, at_now):  # noqa: F811
    response = Api(make_token(make_user())).get("expectations/test.expekt/sla")
    assert_error(response, 404)
    assert "Did you mean 'test.expect'?" in response.json()["message"]


def test_a_token_scoped_to_other_checks__sees_a_404_and_no_suggestion(week, at_now):  # noqa: F811
    response = Api(make_token(make_user(), checks=["test.record"])).get(PATH)
    assert_error(response, 404)
    assert "Did you mean" not in response.json()["message"]
    allowed = Api(make_token(make_user("scoped"), checks=["test.expect"])).get(PATH)
    assert allowed.status_code == 200, allowed.content


def test_needs_authentication_and_the_view_permission(week, at_now):  # noqa: F811
    assert_error(Api().get(PATH), 401)
    assert_error(Api(make_token(make_user("bare", perms=[]))).get(PATH), 403)
    history_only = make_user("history", perms=["view_jobhistory"])
    assert_error(Api(make_token(history_only)).get(PATH), 403)


def test_a_session_with_the_view_permission(week, at_now):  # noqa: F811
    client = Client()
    client.force_login(make_user("person", perms=["view_futurejob"]))
    response = Api(client=client).get(PATH, days="1")
    assert response.status_code == 200, response.content
    assert response.json()["met"] == [1, 1, 1]


def test_the_openapi_document_describes_it(db):
    document = Client().get("/prescient/openapi.json").json()
    operation = document["paths"]["/prescient/expectations/{name}/sla"]["get"]
    assert operation["operationId"] == "expectation_sla"
    [days] = [p for p in operation["parameters"] if p["name"] == "days"]
    assert (days["schema"]["minimum"], days["schema"]["maximum"], days["schema"]["default"]) == (1, 90, 7)
