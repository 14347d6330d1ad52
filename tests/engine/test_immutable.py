"""What a job keeps for life (#28 item 8): its ``first_check_at`` cannot be changed by
``job.save()``, and ``schedule(..., replace=True)`` moves a pending job's due time, never its
workflow. (The pause of a waiting job, the item's third point, is in test_workflows.py.)"""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import State

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


# --- first_check_at -------------------------------------------------------------------------------


def test_save__refuses_a_changed_first_check_at_and_writes_nothing(make_thing, t0):
    job = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    loaded = FutureJob.objects.get(pk=job.pk)
    loaded.first_check_at = t0 + 48 * HOUR
    loaded.next_check_at = t0 + 2 * HOUR
    message = f"Job {job.pk}: first_check_at is fixed when the job is scheduled ({(t0 + HOUR).isoformat()})"
    with pytest.raises(prescient.ImmutableField, match=re.escape(message)) as info:
        loaded.save()
    assert (info.value.field, info.value.job_id) == ("first_check_at", job.pk)
    assert isinstance(info.value, ValueError)
    stored = FutureJob.objects.get(pk=job.pk)
    assert (stored.first_check_at, stored.next_check_at) == (t0 + HOUR, t0 + HOUR)


def test_save__of_other_fields_or_of_the_same_value_is_allowed(make_thing, t0):
    job = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    loaded = FutureJob.objects.get(pk=job.pk)
    loaded.first_check_at = t0 + HOUR  # the same instant, given again
    loaded.save()
    loaded.first_check_at = t0 + 48 * HOUR
    loaded.next_check_at = t0 + 2 * HOUR
    loaded.save(update_fields=["next_check_at"])  # first_check_at is not written
    stored = FutureJob.objects.get(pk=job.pk)
    assert (stored.first_check_at, stored.next_check_at) == (t0 + HOUR, t0 + 2 * HOUR)


def test_save__a_new_job_sets_it_freely_until_it_is_written(make_thing, t0):
    thing = make_thing()
    job = FutureJob(entity_name="testapp.thing", entity_key=str(thing.pk), job_exec="test.record",
                    first_check_at=t0, next_check_at=t0, created_at=t0)
    job.first_check_at = t0 + HOUR
    job.save()
    assert FutureJob.objects.get(pk=job.pk).first_check_at == t0 + HOUR
    job.first_check_at = t0 + 2 * HOUR  # the same object, now stored
    with pytest.raises(prescient.ImmutableField):
        job.save()


def test_the_history__shows_the_first_check_as_scheduled(make_thing, t0):
    job = prescient.schedule(make_thing(), "test.record", at=t0, now=t0)
    loaded = FutureJob.objects.get(pk=job.pk)
    loaded.first_check_at = t0 + 30 * 24 * HOUR  # after its end
    with pytest.raises(prescient.ImmutableField):
        loaded.save()
    prescient.tick(t0)
    assert JobHistory.objects.get(job_id=job.pk).first_check_at == t0


# --- the workflow -----------------------------------------------------------------------------------


def test_schedule_replace__into_another_workflow_is_refused_and_changes_nothing(make_thing, t0):
    thing = make_thing()
    job = prescient.schedule(thing, "test.record", workflow="A", at=t0 + HOUR, now=t0)
    with pytest.raises(prescient.ImmutableField, match=re.escape(
        f"Job {job.pk} (test.record testapp.thing:{thing.pk}) is in workflow 'A', not 'B': replace=True moves "
        "a pending job's due time, never its workflow."
    )) as info:
        prescient.schedule(thing, "test.record", workflow="B", replace=True, at=t0 + 5 * HOUR, now=t0)
    assert info.value.field == "workflow"
    stored = FutureJob.objects.get(pk=job.pk)
    assert (stored.workflow, stored.next_check_at) == ("A", t0 + HOUR)


def test_schedule_replace__out_of_no_workflow_into_one_is_refused_too(make_thing, t0):
    thing = make_thing()
    prescient.schedule(thing, "test.record", at=t0 + HOUR, now=t0)
    with pytest.raises(prescient.ImmutableField, match="is in workflow '', not 'B'"):
        prescient.schedule(thing, "test.record", workflow="B", replace=True, now=t0)
    assert FutureJob.objects.get().workflow == ""


def test_schedule__without_replace_or_without_a_workflow_keeps_the_workflow(make_thing, t0):
    thing = make_thing()
    job = prescient.schedule(thing, "test.record", workflow="A", at=t0 + HOUR, now=t0)
    same = prescient.schedule(thing, "test.record", workflow="B", at=t0 + 5 * HOUR, now=t0)  # returned as it is
    assert (same.pk, same.workflow, same.next_check_at) == (job.pk, "A", t0 + HOUR)
    moved = prescient.schedule(thing, "test.record", replace=True, at=t0 + 5 * HOUR, now=t0)
    assert (moved.pk, moved.workflow, moved.next_check_at) == (job.pk, "A", t0 + 5 * HOUR)
    moved = prescient.schedule(thing, "test.record", workflow="A", replace=True, at=t0 + 6 * HOUR, now=t0)
    assert (moved.workflow, moved.next_check_at, moved.state) == ("A", t0 + 6 * HOUR, State.SCHEDULED)


def test_prescient_schedule_replace__into_another_workflow_is_an_error_and_its_dry_run_says_so(make_thing, t0):
    thing = make_thing()
    job = prescient.schedule(thing, "test.record", workflow="A", at=t0 + HOUR, now=t0)
    prescient.schedule(make_thing(), "test.record", workflow="B", at=t0 + HOUR, now=t0)  # B is in use
    args = ["prescient_schedule", "--check", "test.record", "--entity", f"testapp.thing:{thing.pk}",
            "--workflow", "B", "--replace", "--delay-seconds", "18000", "--now", t0.isoformat()]
    out = StringIO()
    call_command(*args, "--dry-run", stdout=out)
    assert out.getvalue() == (
        f"Job {job.pk} (test.record testapp.thing:{thing.pk}) is in workflow 'A': --replace moves its due time, "
        "never its workflow; nothing would change.\n"
    )
    with pytest.raises(CommandError, match="is in workflow 'A', not 'B'"):
        call_command(*args, stdout=StringIO())
    assert FutureJob.objects.get(pk=job.pk).next_check_at == t0 + HOUR


def test_the_api__answers_replace_into_another_workflow_with_a_409_on_the_field_workflow(make_thing):
    from tests.api.test_views import Api, assert_error, make_token, make_user, task_body

    api, thing = Api(make_token(make_user())), make_thing()
    first = api.post("tasks", task_body(thing, workflow="a", delay_seconds=3600)).json()
    response = api.post("tasks", task_body(thing, workflow="b", delay_seconds=86400, replace=True))
    assert_error(response, 409, ["workflow"], "is in workflow 'a', not 'b': replace=True moves")
    assert api.get(f"tasks/{first['id']}").json()["next_check_at"] == first["next_check_at"]
