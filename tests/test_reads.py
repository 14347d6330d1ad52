"""Reads off the primary (prescient/reads.py) on the test databases: "mirror" is a second alias
on the test database itself, added for this module only (an alias in tests/settings.py would be
asked by the system checks of every other test), so a query can be seen to go to it. Against a
real streaming replica: tests/test_replica.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections, transaction
from django.test import RequestFactory, override_settings
from django.test.utils import CaptureQueriesContext

from prescient import reads
from prescient.models import FutureJob, JobHistory, Worker
from prescient.states import State

ON_MIRROR = {"SLOT_MINUTES": 15, "TIMEOUT_SECONDS": 2, "HISTORY_RETENTION_DAYS": None, "READ_DATABASE": "mirror"}
BOTH = ["default", "mirror"]


@pytest.fixture(scope="module", autouse=True)
def mirror(django_db_setup: None) -> Iterator[None]:
    """The alias "mirror": the test database's own settings under a second name, its own connection."""
    settings.DATABASES["mirror"] = connections.settings["mirror"] = {**connections["default"].settings_dict}
    try:
        yield
    finally:
        connections["mirror"].close()
        del connections["mirror"]
        settings.DATABASES.pop("mirror", None)
        connections.settings.pop("mirror", None)


@pytest.fixture
def on_mirror() -> Iterator[None]:
    with override_settings(PRESCIENT=ON_MIRROR):
        yield


class Seen:
    """The statements on each alias that name a prescient table."""

    def __init__(self) -> None:
        self.contexts = {alias: CaptureQueriesContext(connections[alias]) for alias in BOTH}

    def __enter__(self) -> Seen:
        for context in self.contexts.values():
            context.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for context in self.contexts.values():
            context.__exit__(*exc)

    def on(self, alias: str) -> list[str]:
        return [q["sql"] for q in self.contexts[alias].captured_queries if "prescient_" in q["sql"]]


def test_unset__every_read_stays_on_the_default_database():
    assert reads.read_alias() == "default"
    with reads.reading() as alias:
        assert alias == "default"
        assert FutureJob.objects.all().db == "default"
    assert reads.as_of("default") is None


def test_set__reads_inside_reading_go_to_it_and_writes_never(on_mirror):
    assert reads.read_alias() == "mirror"
    assert FutureJob.objects.all().db == "default"  # outside reading(): nothing changes
    with reads.reading() as alias:
        assert alias == "mirror" and reads.current() == "mirror"
        for queryset in (FutureJob.objects.all(), JobHistory.objects.filter(outcome="completed"), Worker.objects.all()):
            assert queryset.db == "mirror"
        assert FutureJob.objects.select_for_update().db == "default"  # a claim's read
        assert FutureJob.objects.using("default").db == "default"  # named: as named
        assert reads.on_primary(FutureJob.objects.all()).db == "default"
    assert reads.current() is None and FutureJob.objects.all().db == "default"


def test_set__a_request_that_may_act_reads_on_the_primary(on_mirror):
    factory = RequestFactory()
    for method, expected in (("get", "mirror"), ("head", "mirror"), ("post", "default"), ("delete", "default")):
        with reads.reading(getattr(factory, method)("/")) as alias:
            assert alias == expected, method


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_set__inside_a_transaction_on_the_primary_reads_stay_there(on_mirror):
    with transaction.atomic(), reads.reading() as alias:  # a read there may precede a write
        assert alias == "default" and FutureJob.objects.all().db == "default"


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_admin_lists_and_dashboard__read_on_the_mirror(on_mirror, admin_client, make_job):
    job = make_job()
    for url in ("/admin/prescient/futurejob/", "/admin/prescient/futurejob/dashboard/",
                "/admin/prescient/jobhistory/", "/admin/prescient/worker/", "/admin/prescient/workflow/",
                "/admin/prescient/schedule/"):
        with Seen() as seen:
            response = admin_client.get(url)
        assert response.status_code == 200, url
        assert seen.on("mirror"), url
        assert seen.on("default") == [], (url, seen.on("default"))
        assert b"As of" not in response.content  # not a replica: nothing lags
    assert f"/admin/prescient/futurejob/{job.pk}/change/" in admin_client.get("/admin/prescient/futurejob/").text


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_admin_action__reads_and_acts_on_the_primary(on_mirror, admin_client, make_job):
    job = make_job()
    with Seen() as seen:
        response = admin_client.post(
            "/admin/prescient/futurejob/", {"action": "pause_jobs", "_selected_action": [job.pk]}
        )
    assert response.status_code == 302
    assert seen.on("mirror") == []
    assert any("UPDATE" in sql for sql in seen.on("default"))
    assert FutureJob.objects.get(pk=job.pk).state == State.PAUSED


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_api__gets_on_the_mirror_posts_and_health_on_the_primary(on_mirror, admin_client, make_job):
    job = make_job()
    for url in ("/prescient/jobs", f"/prescient/jobs/{job.pk}", "/prescient/history", "/prescient/schedules"):
        with Seen() as seen:
            response = admin_client.get(url)
        assert response.status_code == 200, (url, response.content)
        assert seen.on("mirror") and seen.on("default") == [], url
        assert "Prescient-As-Of" not in response
    with Seen() as seen:
        assert admin_client.get("/prescient/health").status_code == 200
    assert seen.on("mirror") == [] and seen.on("default")
    with Seen() as seen:
        response = admin_client.post(f"/prescient/jobs/{job.pk}/pause", HTTP_X_CSRFTOKEN="x")
    assert response.status_code == 200, response.content
    assert seen.on("mirror") == []
    assert FutureJob.objects.get(pk=job.pk).state == State.PAUSED


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_status_and_metrics__read_on_the_mirror(on_mirror, admin_client, make_job):
    make_job()
    out = StringIO()
    with Seen() as seen:
        call_command("prescient_status", "--json", stdout=out)
    figures = json.loads(out.getvalue())
    assert figures["as_of"] is None and figures["states"]["scheduled"] == 1
    assert seen.on("mirror") and seen.on("default") == []
    pytest.importorskip("prometheus_client")
    with Seen() as seen:
        assert admin_client.get("/prescient/metrics").status_code == 200
    assert seen.on("mirror") and seen.on("default") == []
