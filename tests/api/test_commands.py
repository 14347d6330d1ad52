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
from prescient.models import FutureJob
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
            Event.KILL: "kill"}
ADMIN_ACTIONS = {Event.PAUSE: "pause_jobs", Event.RELEASE: "release_jobs", Event.RUN_NOW: "run_jobs_now",
                 Event.SLEEP: "sleep_jobs", Event.KILL: "kill_jobs"}


def test_every_verb__has_a_route_an_admin_action_and_a_line_in_the_docs():
    document = Client().get(URL + "openapi.json").json()
    matches = (re.fullmatch(r"/prescient/tasks/\{job_id\}/(\w+)", path) for path in document["paths"])
    routes = {m.group(1) for m in matches if m}
    assert routes == set(COMMANDS.values())
    for event in COMMANDS:
        assert callable(getattr(verbs, event.value)), event
    names = [a if isinstance(a, str) else a.__name__ for a in FutureJobAdmin.actions]
    assert set(names) == set(ADMIN_ACTIONS.values())
    endpoints = re.search(r"`POST tasks/\{id\}/([a-z|]+)`", (DOCS / "api.md").read_text(encoding="utf-8"))
    assert endpoints and set(endpoints.group(1).split("|")) == routes
    admin = (DOCS / "admin.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([A-Z]\w+) selected jobs", admin, re.M)  # the table of admin actions
    assert {row.lower() for row in rows} == set(COMMANDS.values())
