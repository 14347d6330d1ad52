"""The JSON API and workflows: ``after`` on create, ``parents`` and ``children`` in answers."""

from __future__ import annotations

import pytest

import prescient
from prescient.models import JobHistory
from prescient.states import Outcome

from .test_views import Api, assert_error, make_token, make_user, task_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    return Api(make_token(make_user()))


def test_create_after__the_job_waits_and_both_sides_list_the_link(api, make_thing):
    parent = api.post("tasks", task_body(make_thing())).json()
    response = api.post("tasks", task_body(make_thing(), after=[parent["id"]], on_parent_failure="run"))
    assert response.status_code == 201, response.content
    child = response.json()
    assert (child["state"], child["parents"], child["children"]) == ("waiting", [parent["id"]], [])
    assert api.get(f"tasks/{parent['id']}").json()["children"] == [child["id"]]
    listed = {job["id"]: job for job in api.get("tasks").json()["items"]}
    assert listed[child["id"]]["parents"] == [parent["id"]]


def test_create_after__an_unknown_id_or_policy_is_a_400_and_writes_nothing(api, make_thing):
    assert_error(api.post("tasks", task_body(make_thing(), after=[424242])), 400, ["after"], "No job with id 424242")
    assert_error(api.post("tasks", task_body(make_thing(), after=[1], on_parent_failure="maybe")), 400)
    assert_error(api.post("tasks", task_body(make_thing(), after=["x"])), 400)
    assert api.get("tasks").json()["items"] == []


def test_history__lists_parents_and_children(api, make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", now=t0)
    child = prescient.schedule(make_thing(), "test.record", after=[parent], now=t0)
    prescient.tick(t0)
    assert JobHistory.objects.get(job_id=child.pk).outcome == Outcome.COMPLETED
    rows = {row["job_id"]: row for row in api.get("history").json()["items"]}
    assert rows[parent.pk]["children"] == [child.pk] and rows[child.pk]["parents"] == [parent.pk]
