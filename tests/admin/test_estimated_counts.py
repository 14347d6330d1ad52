"""The admin lists' counts never scan a large table (#36 item 1, prescient.admin.paging): exact
up to a bound, PostgreSQL's planner estimate beyond it, said so on the page; a page past the
estimate's last one is empty, not an error. The bound is lowered here so that a few rows pass it."""

from __future__ import annotations

import pytest
from django.db import connection

from prescient.admin import paging
from prescient.models import FutureJob, JobHistory

pytestmark = pytest.mark.django_db

JOBS = "/admin/prescient/futurejob/"
NOTE = "PostgreSQL's estimate"


@pytest.fixture
def low_bound(monkeypatch):
    monkeypatch.setattr(paging, "EXACT_UP_TO", 5)


def jobs(make_job, count: int) -> None:
    for _ in range(count):
        make_job()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {FutureJob._meta.db_table}")


def test_under_the_bound__the_exact_count_and_no_note(admin_client, make_job, low_bound):
    jobs(make_job, 4)
    response = admin_client.get(JOBS)
    assert response.status_code == 200
    assert response.context["cl"].result_count == 4
    assert not response.context["cl"].paginator.estimated
    assert NOTE not in response.content.decode()


def test_past_the_bound__postgresqls_estimate_said_so(admin_client, make_job, low_bound):
    jobs(make_job, 12)
    response = admin_client.get(JOBS)
    cl = response.context["cl"]
    if connection.vendor != "postgresql":  # other databases count exactly, as Django does
        assert (cl.result_count, cl.paginator.estimated) == (12, False)
        assert NOTE not in response.content.decode()
        return
    assert cl.paginator.estimated and cl.result_count > 5
    assert f"About {cl.result_count}: {NOTE}" in response.content.decode()
    assert len(cl.result_list) == 12  # the rows shown are the real ones


def test_a_page_past_the_estimate__is_empty_not_an_error(admin_client, make_job, low_bound, monkeypatch):
    from django.contrib import admin

    monkeypatch.setattr(admin.site._registry[FutureJob], "list_per_page", 5)
    jobs(make_job, 12)
    assert len(admin_client.get(JOBS, {"p": 2}).context["cl"].result_list) == 5
    response = admin_client.get(JOBS, {"p": 50})
    if connection.vendor != "postgresql":
        assert response.status_code == 302 and "e=1" in response["Location"]  # Django's own answer
        return
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


def test_the_history_list_too(admin_client, low_bound):
    from tests.test_health import NOW, finished

    for key in range(8):
        finished("test.ship", NOW, key=str(key))
    response = admin_client.get("/admin/prescient/jobhistory/")
    cl = response.context["cl"]
    assert cl.paginator.estimated == (connection.vendor == "postgresql")
    assert JobHistory.objects.count() == 8
