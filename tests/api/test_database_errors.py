"""A bad request is a 400 naming its field, not a database outage (issue #28, item 4): 503 with
Retry-After only when the database cannot be reached. The errors here are raised by real
databases (an id beyond bigint, a database file or server that is not there)."""

from __future__ import annotations

import pytest
from django.db import DataError, OperationalError, connection, transaction
from django.test import RequestFactory

from prescient.api.views import api as ninja_api
from prescient.models import FutureJob
from tests.api.test_views import Api, assert_error, make_token, make_user, task_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    return Api(make_token(make_user()))


@pytest.mark.parametrize("after", [[2**63], [2**64], [0], [-1], [1, 2**63]])
def test_create__after_out_of_range_is_a_400_naming_after(api, make_thing, after):
    response = api.post("tasks", task_body(make_thing(), after=after))
    payload = assert_error(response, 400)
    assert any(field.startswith("after") for field in payload["fields"]), payload
    assert "Retry-After" not in response
    assert not FutureJob.objects.exists()


@pytest.mark.parametrize("job_id", [2**63, 2**64])
def test_paths_and_filters__ids_beyond_bigint_are_not_an_outage(api, job_id):
    assert api.get(f"tasks/{job_id}").status_code == 404
    assert api.post(f"tasks/{job_id}/pause").status_code == 404
    response = api.get("history", job_id=job_id)
    assert_error(response, 400, fields=["job_id"])


def answer_to(exc: Exception):
    return ninja_api.on_exception(RequestFactory().get("/prescient/api/tasks"), exc)


def raised(statement, params=()) -> Exception:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement, params)
    except Exception as exc:  # the database's own error is the subject
        return exc
    raise AssertionError(f"{statement} did not fail")


@pytest.mark.postgres
def test_data_error__bigint_out_of_range_is_a_400_without_retry_after():
    exc = raised("SELECT %s::bigint", [str(2**63)])
    assert isinstance(exc, DataError)
    response = answer_to(exc)
    assert response.status_code == 400
    assert "Retry-After" not in response


def test_unreachable_database__is_a_503_with_retry_after(tmp_path):
    from django.db import connections

    real = connections["default"]
    wrapper = type(real)({
        **real.settings_dict,
        # a server nobody listens on, or a SQLite file in a directory that does not exist
        "HOST": "127.0.0.1", "PORT": 1, "NAME": str(tmp_path / "absent" / "db.sqlite3")
        if real.vendor == "sqlite" else real.settings_dict["NAME"],
    })
    with pytest.raises(OperationalError) as caught:
        wrapper.ensure_connection()
    response = answer_to(caught.value)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
