"""``prescient.enqueue_after``: a django.tasks task that waits on other jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")

from django.tasks import TaskResultStatus
from django.utils import timezone

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.tasksapp import tasks

pytestmark = pytest.mark.django_db


def test_enqueue_after__waits_for_a_task_and_a_check_then_runs(make_thing):
    now = timezone.now()
    first = tasks.add.enqueue(1, 2)
    check_job = prescient.schedule(make_thing(), "test.record", at=now - timedelta(hours=1), now=now)
    result = prescient.enqueue_after(tasks.echo, after=[first, check_job], args=["after"], kwargs={"n": 1})
    assert FutureJob.objects.get(pk=int(result.id)).state == State.WAITING

    prescient.tick(now + timedelta(seconds=1))

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"args": ["after"], "kwargs": {"n": 1}}


def test_enqueue_after__a_failed_parent_cancels_it(make_thing):
    bad = tasks.boom.using(queue_name="a").enqueue("no")
    JobHistory.objects.create(**{**{f: getattr(FutureJob.objects.get(pk=int(bad.id)), f) for f in (
        "kind", "entity_name", "entity_key", "job_exec", "first_check_at", "created_at")},
        "job_id": int(bad.id), "outcome": Outcome.FAILED, "finished_at": timezone.now()})
    FutureJob.objects.filter(pk=int(bad.id)).delete()  # as if it had failed
    result = prescient.enqueue_after(tasks.echo, after=[int(bad.id)])
    row = JobHistory.objects.get(job_id=int(result.id))
    assert (row.outcome, row.reason) == (Outcome.CANCELLED, f"parent job {bad.id} ended failed")
