"""The JSON API's bounds: replace needs the change permission, ``at`` a sane date, and a
workflow must exist to be paused or released through HTTP."""

from __future__ import annotations

import pytest

from prescient.models import FutureJob, Workflow
from tests.api.test_views import Api, assert_error, make_token, make_user, task_body

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def adder():
    return Api(make_token(make_user("adder", perms=["view_futurejob", "add_futurejob"])))


def test_replace_without_the_change_permission__is_403_and_moves_nothing(adder, make_thing):
    thing = make_thing()
    assert adder.post("tasks", task_body(thing)).status_code == 201
    due = FutureJob.objects.get().next_check_at
    assert_error(adder.post("tasks", task_body(thing, delay_seconds=60, replace=True)), 403, message="change_futurejob")
    assert FutureJob.objects.get().next_check_at == due


def test_at_of_year_1__is_400(adder, make_thing):
    assert_error(adder.post("tasks", task_body(make_thing(), at="0001-01-01T00:00:00+00:00")), 400, fields=["at"])
    assert not FutureJob.objects.exists()


def test_pausing_an_unknown_workflow__is_404_and_leaves_no_row():
    api = Api(make_token(make_user()))
    for action in ("pause", "release"):
        assert_error(api.post(f"workflows/never-seen/{action}"), 404, message="never-seen")
    assert not Workflow.objects.filter(name="never-seen").exists()
