"""``GET health/checks`` (#35 item 2): each check's runs, failures, run times, last error and
pending jobs over the past ``minutes``; the view permissions of jobs and history, and a token's
scope of checks."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from tests.api.test_views import Api, assert_error, make_token, make_user
from tests.test_health import NOW, hour  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

PATH = "health/checks"


@pytest.fixture
def at_now(monkeypatch):
    """The view asks for the real time: give it the fixture's."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def test_the_health_of_each_check(hour, at_now):  # noqa: F811
    response = Api(make_token(make_user())).get(PATH)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["minutes"], body["since"], body["until"]) == (60, "2026-11-22T11:00:00Z", "2026-11-22T12:00:00Z")
    bill, ship = body["checks"]
    assert bill == {
        "name": "test.bill", "finished": 0, "failed": 0, "runs": 0, "failed_runs": 0, "runs_per_minute": 0.0,
        "failure_rate": None, "run_seconds_p50": None, "run_seconds_p95": None, "last_error": None,
        "pending": 3, "pending_estimated": False, "due": 2, "due_estimated": False,
        "oldest_overdue_seconds": 1800.0, "held": 0,
        "held_by": {},
    }
    assert ship == {
        "name": "test.ship", "finished": 4, "failed": 1, "runs": 6, "failed_runs": 3, "runs_per_minute": 0.1,
        "failure_rate": 0.5, "run_seconds_p50": 2.5, "run_seconds_p95": 3.85,
        "last_error": {
            "history_id": hour["last"].pk, "finished_at": "2026-11-22T11:50:00Z", "outcome": "failed",
            "exception_class": "builtins.TimeoutError", "error": "TimeoutError: carrier down\nTraceback ...",
            "entity_name": "testapp.thing", "entity_key": "7",
        },
        "pending": 1, "pending_estimated": False, "due": 0, "due_estimated": False,
        "oldest_overdue_seconds": None, "held": 0,
        "held_by": {},
    }


def test_minutes_chooses_the_window(hour, at_now):  # noqa: F811
    body = Api(make_token(make_user())).get(PATH, minutes="90").json()
    assert body["since"] == "2026-11-22T10:30:00Z"
    assert [(check["name"], check["finished"]) for check in body["checks"]] == [("test.bill", 0), ("test.ship", 5)]


@pytest.mark.parametrize("minutes", ["0", "10081", "-1", "hour", "1.5", ""])
def test_minutes_out_of_range_or_not_a_number__is_a_400_naming_minutes(hour, at_now, minutes):  # noqa: F811
    assert_error(Api(make_token(make_user())).get(PATH, minutes=minutes), 400, fields=["minutes"])


def test_a_token_scoped_to_some_checks__sees_only_those(hour, at_now):  # noqa: F811
    body = Api(make_token(make_user(), checks=["test.bill"])).get(PATH).json()
    assert [check["name"] for check in body["checks"]] == ["test.bill"]


def test_needs_authentication_and_the_view_permissions_of_jobs_and_history(hour, at_now):  # noqa: F811
    assert_error(Api().get(PATH), 401)
    assert_error(Api(make_token(make_user("bare", perms=[]))).get(PATH), 403)
    assert_error(Api(make_token(make_user("jobs", perms=["view_futurejob"]))).get(PATH), 403)
    assert_error(Api(make_token(make_user("history", perms=["view_jobhistory"]))).get(PATH), 403)
    both = make_user("both", perms=["view_futurejob", "view_jobhistory"])
    assert Api(make_token(both)).get(PATH).status_code == 200


def test_a_session_with_the_view_permissions(hour, at_now):  # noqa: F811
    client = Client()
    client.force_login(make_user("person", perms=["view_futurejob", "view_jobhistory"]))
    response = Api(client=client).get(PATH)
    assert response.status_code == 200, response.content
    assert len(response.json()["checks"]) == 2


def test_the_openapi_document_describes_it(db):
    document = Client().get("/prescient/openapi.json").json()
    operation = document["paths"]["/prescient/health/checks"]["get"]
    assert operation["operationId"] == "check_health"
    [minutes] = [p for p in operation["parameters"] if p["name"] == "minutes"]
    assert (minutes["schema"]["minimum"], minutes["schema"]["maximum"], minutes["schema"]["default"]) == (1, 10080, 60)
