"""``GET history?error=&exception=``: the finished jobs by their error's text (a part of it, in any
case) and by their exception class (its path or its last parts), as the admin's ``error:`` and
``exception:`` searches find them (one matching, prescient.queries); with the other filters, the
paging, the permission and the token's scope of ``GET history``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from prescient.states import Outcome
from tests.api.test_views import ALL_PERMS, Api, assert_error, make_token, make_user
from tests.test_health import NOW, finished

pytestmark = pytest.mark.django_db

M = timedelta(minutes=1)


@pytest.fixture
def rows():
    return {
        "timeout": finished("test.ship", NOW - 3 * M, Outcome.FAILED, error="TimeoutError: Carrier DOWN after 30 s",
                            exception="builtins.TimeoutError", key="1"),
        "carrier": finished("test.ship", NOW - 2 * M, Outcome.FAILED, error="carrier 42 answered 503",
                            exception="shop.carriers.CarrierDown", key="2"),
        "retried": finished("test.bill", NOW - M, error="ValueError: bad amount", exception="builtins.ValueError",
                            key="3"),
        "clean": finished("test.bill", NOW, key="42"),
    }


@pytest.fixture
def api():
    return Api(make_token(make_user()))


def found(api: Api, **query: object) -> list[int]:
    response = api.get("history", **query)
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["items"]]


def ids(*rows) -> list[int]:
    """Newest first, as GET history answers."""
    return sorted((row.pk for row in rows), reverse=True)


def test_error__a_part_of_the_text_in_any_case(api, rows):
    assert found(api, error="carrier") == ids(rows["timeout"], rows["carrier"])
    assert found(api, error="CARRIER down") == ids(rows["timeout"])
    assert found(api, error=" answered 503 ") == ids(rows["carrier"])
    assert found(api, error="") == ids(rows["timeout"], rows["carrier"], rows["retried"])  # every row with one


def test_exception__by_its_path_or_its_last_parts_never_a_part_of_a_name(api, rows):
    assert found(api, exception="builtins.TimeoutError") == ids(rows["timeout"])
    assert found(api, exception="TimeoutError") == ids(rows["timeout"])
    assert found(api, exception=" carriers.CarrierDown ") == ids(rows["carrier"])
    assert found(api, exception="CarrierDown") == ids(rows["carrier"])
    assert found(api, exception="Error") == []
    assert found(api, exception="Down") == []
    assert found(api, exception="") == ids(rows["timeout"], rows["carrier"], rows["retried"])  # every row with one


def test_exception__case_counts_on_every_database(api, rows):
    """SQLite's LIKE (``endswith``) ignores the case of ASCII letters; PostgreSQL's does not."""
    assert found(api, exception="timeouterror") == []
    assert found(api, exception="builtins.timeouterror") == []
    assert found(api, exception="carriers.carrierdown") == []


def test_no_match__an_empty_page(api, rows):
    response = api.get("history", error="no such text")
    assert response.status_code == 200
    assert response.json() == {"items": [], "next_cursor": None}
    assert found(api, exception="KeyError") == []


def test_combined__with_each_other_and_the_other_filters(api, rows):
    assert found(api, error="carrier", exception="TimeoutError") == ids(rows["timeout"])
    assert found(api, error="bad amount", exception="TimeoutError") == []
    assert found(api, error="carrier", check="test.bill") == []
    assert found(api, error="", check="test.bill") == ids(rows["retried"])
    assert found(api, exception="ValueError", outcome="completed") == ids(rows["retried"])
    assert found(api, exception="", outcome="failed") == ids(rows["timeout"], rows["carrier"])
    assert found(api, error="503", entity="testapp.thing:2") == ids(rows["carrier"])
    assert found(api, error="503", entity="testapp.thing:1") == []


def test_paging__the_cursor_keeps_the_filter(api, rows):
    first = api.get("history", error="", limit=2).json()
    assert [row["id"] for row in first["items"]] == ids(rows["carrier"], rows["retried"])
    rest = api.get("history", error="", limit=2, cursor=first["next_cursor"]).json()
    assert [row["id"] for row in rest["items"]] == ids(rows["timeout"]) and rest["next_cursor"] is None


def test_the_admin_s_search_finds_the_same_rows(admin_client, api, rows):
    for field, prefix in (("error", "error:"), ("exception", "exception:")):
        for term in ("carrier", "TimeoutError", "carriers.CarrierDown", "timeouterror", "Error", ""):
            response = admin_client.get("/admin/prescient/jobhistory/", {"q": prefix + term})
            admin = sorted((row.pk for row in response.context["cl"].result_list), reverse=True)
            assert found(api, **{field: term}) == admin, (field, term)


@pytest.mark.parametrize("query", [{"error": "carrier"}, {"exception": "TimeoutError"}])
def test_permission__needs_view_jobhistory_as_the_other_filters(rows, query):
    without = Api(make_token(make_user("without", [p for p in ALL_PERMS if p != "view_jobhistory"])))
    assert_error(without.get("history", **query), 403, message="prescient.view_jobhistory")
    only = Api(make_token(make_user("only", ["view_jobhistory"])))
    assert only.get("history", **query).json()["items"]


def test_scope__a_token_finds_only_its_checks_rows(rows):
    user = make_user()
    bill = Api(make_token(user, checks=["test.bill"]))
    assert [row["id"] for row in bill.get("history", error="").json()["items"]] == ids(rows["retried"])
    assert bill.get("history", error="carrier").json()["items"] == []
    assert bill.get("history", exception="TimeoutError").json()["items"] == []
    ship = Api(make_token(user, checks=["test.ship"]))
    assert [row["id"] for row in ship.get("history", exception="").json()["items"]] == ids(
        rows["timeout"], rows["carrier"])


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"error": "x" * 501}, "error"), ({"error": "a\x00b"}, "error"),
        ({"exception": "x" * 301}, "exception"), ({"exception": "a\x00b"}, "exception"),
    ],
)
def test_bad_values_are_a_400(api, query, field):
    assert_error(api.get("history", **query), 400, [field])


def test_openapi__documents_both_parameters():
    document = Api().client.get("/prescient/openapi.json").json()
    parameters = {p["name"]: p for p in document["paths"]["/prescient/history"]["get"]["parameters"]}
    assert "in any case" in parameters["error"]["description"]
    assert "builtins.TimeoutError" in parameters["exception"]["description"]
    assert parameters["error"]["required"] is False and parameters["exception"]["required"] is False
