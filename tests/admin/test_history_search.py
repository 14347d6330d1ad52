"""The finished jobs' search (#35 item 2): ``error:`` finds a part of the error's text in any case,
``exception:`` an exception class by its path or its last parts; other terms still find an entity
or a workflow exactly, from indexes (#36: a bare key is looked up under each entity name, and the
workflow half has an index of its own)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from prescient import queries
from prescient.models import FutureJob, JobHistory
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


def test_a_bare_key__is_found_under_every_entity_name_in_the_history_a_check_of_it_registered_or_not(
    admin_client, rows
):
    gone = JobHistory.objects.create(
        job_id=9, entity_name="billing.account", entity_key="42", job_exec="billing.renewal",
        outcome=Outcome.COMPLETED, first_check_at=NOW, created_at=NOW, finished_at=NOW,
    )
    assert found(admin_client, "42") == ids(rows["clean"], gone)
    assert found(admin_client, "billing.account:42") == ids(gone)


def test_entity_names__each_name_once_in_order_in_one_query(rows, django_assert_num_queries):
    JobHistory.objects.create(
        job_id=9, entity_name="billing.account", entity_key="7", job_exec="billing.renewal",
        outcome=Outcome.COMPLETED, first_check_at=NOW, created_at=NOW, finished_at=NOW,
    )
    with django_assert_num_queries(1):
        assert queries.entity_names(JobHistory.objects.all()) == ["billing.account", "testapp.thing"]
    assert queries.entity_names(FutureJob.objects.all()) == []


def test_past_so_many_entity_names__a_bare_key_is_matched_alone_and_still_found(admin_client, rows, monkeypatch):
    monkeypatch.setattr(queries, "MAX_ENTITY_NAMES", 0)
    assert queries.entity_names(JobHistory.objects.all()) is None
    assert found(admin_client, "42") == ids(rows["clean"])


def test_the_search_box_says_how(admin_client, rows):
    content = admin_client.get(HISTORY).content.decode()
    help_text = re.search(r'<div class="help" id="searchbar_helptext">(.*?)</div>', content, re.S)
    assert help_text, "no help beside the search box"
    assert "error:text" in help_text.group(1) and "exception:Name" in help_text.group(1)


@pytest.mark.postgres
def test_on_postgres__a_key_is_looked_up_in_the_entity_and_workflow_indexes_not_read_off_the_whole_history(rf):
    """A bare key is one OR (an entity key under each name, or a workflow name): both halves
    answered by an index (the workflow's: migration 0027), not by a walk over every row in
    ``finished_at`` order, whatever names the history holds (a check without a model, one
    unregistered since)."""
    from django.contrib import admin
    from django.db import connection

    at = NOW - timedelta(days=1)
    JobHistory.objects.bulk_create(
        JobHistory(job_id=n, entity_name="testapp.thing" if n % 3 else "billing.nightly", entity_key=str(n),
                   job_exec="test.ship", workflow=f"order-{n}" if n % 100 == 0 else "", outcome=Outcome.COMPLETED,
                   first_check_at=at, created_at=at, finished_at=at + n * timedelta(seconds=1))
        for n in range(1, 20_001)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE prescient_jobhistory")
    history_admin = admin.site._registry[JobHistory]
    for term, found in (("4242", ["4242"]), ("order-4200", ["4200"])):
        queryset, _ = history_admin.get_search_results(rf.get(HISTORY), JobHistory.objects.all(), term)
        assert sorted(queryset.values_list("entity_key", flat=True)) == found
        plan = queryset.order_by("-finished_at", "-id")[:100].explain()
        assert re.search(r"Index Cond: .*\(workflow\)::text = ", plan), plan
        assert re.search(r"Index Cond: .*\(entity_key\)::text = ", plan), plan
