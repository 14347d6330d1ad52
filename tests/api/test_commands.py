"""The JSON API's commands to one job (prescient/api/commands.py): sleep, run now on a paused
job, and every verb in every face (the API's routes, the admin's actions and their docs:
docs/api.md and docs/admin.md)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from prescient import slots
from prescient.admin.jobs import FutureJobAdmin
from prescient.engine import verbs
from prescient.models import FutureJob, JobHistory
from prescient.states import Event, State
from tests.api.test_views import URL, Api, assert_error, make_token, make_user

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[2] / "docs"
SLOT = timedelta(minutes=15)


@pytest.fixture
def api():
    return Api(make_token(make_user()))


def test_sleep__moves_the_next_check_to_the_slot_of_at(api, make_job):
    job = make_job("test.record")
    at = timezone.now() + timedelta(days=2, minutes=1)
    response = api.post(f"tasks/{job.pk}/sleep", {"at": at.isoformat()})
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "scheduled"
    assert FutureJob.objects.get(pk=job.pk).next_check_at == slots.round_up(at, 15)


def test_sleep__of_a_running_job_is_deferred(api, make_job):
    job = make_job("test.record", state=State.RUNNING, reserved_by="w", reserved_at=timezone.now())
    at = timezone.now() + timedelta(hours=3)
    response = api.post(f"tasks/{job.pk}/sleep", {"at": at.isoformat()})
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "running"
    assert FutureJob.objects.get(pk=job.pk).sleep_until == slots.round_up(at, 15)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"at": "2026-12-01T09:00:00"}, "at"),  # naive
        ({"at": "yesterday"}, "at"),
        ({}, "at"),
        ({"at": "2026-12-01T09:00:00+00:00", "extra": 1}, "extra"),
    ],
)
def test_sleep__bad_input_is_a_400(api, make_job, body, field):
    job = make_job("test.record")
    assert_error(api.post(f"tasks/{job.pk}/sleep", body), 400, fields=[field] if field != "extra" else ())
    assert FutureJob.objects.get(pk=job.pk).next_check_at == job.next_check_at


def test_sleep__far_past_or_beyond_the_horizon_is_a_400(api, make_job):
    job = make_job("test.record")
    for at in (timezone.now() - timedelta(days=2), timezone.now() + timedelta(days=400)):
        assert_error(api.post(f"tasks/{job.pk}/sleep", {"at": at.isoformat()}), 400, fields=["at"])


def test_sleep__unknown_or_out_of_scope_jobs_are_a_404(make_job):
    job = make_job("test.record")
    scoped = Api(make_token(make_user("scoped"), checks=["other.check"]))
    at = (timezone.now() + SLOT).isoformat()
    assert_error(scoped.post(f"tasks/{job.pk}/sleep", {"at": at}), 404)
    assert_error(Api(make_token(make_user("any"))).post("tasks/424242/sleep", {"at": at}), 404)


def test_run__of_a_paused_job_releases_it_and_makes_it_due_now(api, make_job):
    job = make_job("test.record", state=State.PAUSED, last_state=State.SCHEDULED,
                   next_check_at=timezone.now() + timedelta(days=3))
    before = timezone.now()
    response = api.post(f"tasks/{job.pk}/run")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "scheduled"
    assert before <= FutureJob.objects.get(pk=job.pk).next_check_at <= timezone.now()


# --- every verb in every face ------------------------------------------------------------------

#: A person's commands to one job (events of the table), and what each face calls them.
COMMANDS = {Event.PAUSE: "pause", Event.RELEASE: "release", Event.RUN_NOW: "run", Event.SLEEP: "sleep",
            Event.CANCEL: "cancel", Event.KILL: "kill"}
ADMIN_ACTIONS = {Event.PAUSE: "pause_jobs", Event.RELEASE: "release_jobs", Event.RUN_NOW: "run_jobs_now",
                 Event.SLEEP: "sleep_jobs", Event.CANCEL: "cancel_jobs", Event.KILL: "kill_jobs"}


def test_every_verb__has_a_route_an_admin_action_and_a_line_in_the_docs():
    document = Client().get(URL + "openapi.json").json()
    matches = (re.fullmatch(r"/prescient/jobs/\{job_id\}/(\w+)", path) for path in document["paths"])
    routes = {m.group(1) for m in matches if m}
    assert routes == set(COMMANDS.values())
    for event in COMMANDS:
        assert callable(getattr(verbs, event.value)), event
    names = [a if isinstance(a, str) else a.__name__ for a in FutureJobAdmin.actions]
    assert set(names) == set(ADMIN_ACTIONS.values())
    endpoints = re.search(r"`POST jobs/\{id\}/([a-z|]+)`", (DOCS / "api.md").read_text(encoding="utf-8"))
    assert endpoints and set(endpoints.group(1).split("|")) == routes
    admin = (DOCS / "admin.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([A-Z]\w+) selected jobs", admin, re.M)  # the table of admin actions
    assert {row.lower() for row in rows} == set(COMMANDS.values())


# --- cancel and run again (issue #35 item 1) ---------------------------------------------------


def test_cancel__ends_the_job_cancelled(api, make_job):
    job = make_job("test.record")
    response = api.post(f"tasks/{job.pk}/cancel")
    assert response.status_code == 200, response.content
    assert response.json() == {"id": job.pk, "result": "ended"}
    assert not FutureJob.objects.exists()
    assert JobHistory.objects.get(job_id=job.pk).outcome == "cancelled"


def test_cancel__needs_the_change_permission_and_the_job_in_scope(make_job):
    job = make_job("test.record")
    viewer = Api(make_token(make_user("viewer", perms=["view_futurejob"])))
    assert_error(viewer.post(f"tasks/{job.pk}/cancel"), 403)
    scoped = Api(make_token(make_user("scoped"), checks=["other.check"]))
    assert_error(scoped.post(f"tasks/{job.pk}/cancel"), 404)
    assert FutureJob.objects.filter(pk=job.pk).exists()


def _finished(make_job):
    job = make_job("test.record")
    verbs.kill(job, "by mistake")
    return JobHistory.objects.get(job_id=job.pk)


def test_rerun__creates_a_live_job_linked_both_ways(api, make_job):
    row = _finished(make_job)
    response = api.post(f"history/{row.pk}/rerun")
    assert response.status_code == 201, response.content
    body = response.json()
    job = FutureJob.objects.get()
    assert (body["id"], body["rerun_of"], body["check"], body["state"]) == (job.pk, row.pk, "test.record", "scheduled")
    assert body["entity"] == {"model": row.entity_name, "key": row.entity_key}
    verbs.cancel_job(job.pk)
    reruns = api.get("history", rerun_of=row.pk).json()["items"]
    assert [(item["job_id"], item["rerun_of"]) for item in reruns] == [(job.pk, row.pk)]


def test_rerun__refused_while_a_live_job_exists_is_a_409_writing_nothing(api, make_job):
    row = _finished(make_job)
    live = FutureJob.objects.create(
        entity_name=row.entity_name, entity_key=row.entity_key, job_exec=row.job_exec,
        first_check_at=timezone.now(), next_check_at=timezone.now(), created_at=timezone.now(),
    )
    response = api.post(f"history/{row.pk}/rerun")
    assert_error(response, 409)
    assert f"job {live.pk} of this check for this entity is live" in response.json()["message"]
    assert list(FutureJob.objects.values_list("pk", flat=True)) == [live.pk]


def test_rerun__needs_the_add_permission_an_existing_row_and_its_check_in_scope(make_job):
    row = _finished(make_job)
    viewer = Api(make_token(make_user("viewer", perms=["view_futurejob", "view_jobhistory"])))
    assert_error(viewer.post(f"history/{row.pk}/rerun"), 403)
    scoped = Api(make_token(make_user("scoped"), checks=["other.check"]))
    assert_error(scoped.post(f"history/{row.pk}/rerun"), 404)
    assert_error(Api(make_token(make_user("any"))).post("history/424242/rerun"), 404)
    assert not FutureJob.objects.exists()
