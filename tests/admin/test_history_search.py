"""The finished jobs' search (#35 item 2): ``error:`` finds a part of the error's text in any case,
``exception:`` an exception class by its path or its last parts; other terms still find an entity
or a workflow exactly."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from prescient.states import Outcome
from tests.test_health import NOW, finished

pytestmark = pytest.mark.django_db

HISTORY = "/admin/prescient/jobhistory/"
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


def found(client, term: str, **filters: str) -> list[int]:
    response = client.get(HISTORY, {"q": term, **filters})
    assert response.status_code == 200
    return sorted(row.pk for row in response.context["cl"].result_list)


def ids(*rows) -> list[int]:
    return sorted(row.pk for row in rows)


def test_error__a_part_of_the_text_in_any_case(admin_client, rows):
    assert found(admin_client, "error:carrier") == ids(rows["timeout"], rows["carrier"])
    assert found(admin_client, "Error: answered 503") == ids(rows["carrier"])
    assert found(admin_client, "error:carrier", job_exec="test.bill") == []
    assert found(admin_client, "error:") == ids(rows["timeout"], rows["carrier"], rows["retried"])
    assert found(admin_client, "error:no such text") == []


def test_exception__by_its_path_or_its_last_parts(admin_client, rows):
    assert found(admin_client, "exception:builtins.TimeoutError") == ids(rows["timeout"])
    assert found(admin_client, "exception:TimeoutError") == ids(rows["timeout"])
    assert found(admin_client, "exception: carriers.CarrierDown ") == ids(rows["carrier"])
    assert found(admin_client, "exception:Error") == []  # a whole name, not a part of one
    assert found(admin_client, "exception:") == ids(rows["timeout"], rows["carrier"], rows["retried"])


def test_other_terms__an_entity_or_a_workflow_exactly_as_before(admin_client, rows):
    assert found(admin_client, "42") == ids(rows["clean"])
    assert found(admin_client, "testapp.thing#2") == ids(rows["carrier"])
    assert found(admin_client, "carrier") == []


def test_the_search_box_says_how(admin_client, rows):
    content = admin_client.get(HISTORY).content.decode()
    help_text = re.search(r'<div class="help" id="searchbar_helptext">(.*?)</div>', content, re.S)
    assert help_text, "no help beside the search box"
    assert "error:text" in help_text.group(1) and "exception:Name" in help_text.group(1)
