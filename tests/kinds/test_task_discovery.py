"""A django.tasks task runs wherever in an installed app it is defined; nothing outside the
installed apps is ever imported from a job row (prescient.kinds.tasks.find_task)."""

from __future__ import annotations

import logging
import os
import sys
from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")

from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

from prescient.kinds import tasks as task_kind
from prescient.models import FutureJob, JobHistory
from prescient.runtime.tick import tick
from tests.runtime.test_worker import Workers

SNEAKY = "tests.outside.sneaky"


def a_task_job(path: str, now) -> FutureJob:
    """A task job naming ``path``, as another process (or an attacker with the database) wrote it."""
    return FutureJob.objects.create(
        kind="task", entity_name=task_kind.TASK_ENTITY, entity_key=path, job_exec=task_kind.CHECK_PREFIX + path,
        first_check_at=now, next_check_at=now, created_at=now, queue="default",
        payload={"args": [], "kwargs": {}, "backend": "default", "worker_ids": []},
    )


@pytest.fixture
def forget_jobs_module():
    """As in a fresh process: tests.tasksapp.jobs not imported, its task not registered."""
    def forget() -> None:
        sys.modules.pop("tests.tasksapp.jobs", None)
        task_kind._tasks.pop("tests.tasksapp.jobs.shout", None)
        from prescient import checks

        checks.unregister("task:tests.tasksapp.jobs.shout")

    forget()
    yield forget
    forget()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_task_in_another_module_of_an_installed_app__runs_in_a_worker(tmp_path):
    from tests.tasksapp.jobs import shout

    result = shout.enqueue("hi")
    workers = Workers(tmp_path)
    try:
        proc = workers.start("--once")
        assert workers.finish(proc, 60) == 0, workers.output(proc)
    finally:
        workers.cleanup()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, JobHistory.objects.values("outcome", "last_error").first()
    assert result.return_value == "HI"


@pytest.mark.django_db
def test_task_module_is_imported_on_demand_by_the_tick_and_get_result(forget_jobs_module):
    now = timezone.now()
    job = a_task_job("tests.tasksapp.jobs.shout", now)
    job.payload = {**job.payload, "args": ["hey"]}
    job.save()
    assert "tests.tasksapp.jobs" not in sys.modules
    summary = tick(now)
    assert summary.counts["completed"] == 1
    forget_jobs_module()
    result = default_task_backend.get_result(str(job.pk))  # imports it again, on demand
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "HEY")


@pytest.mark.django_db
def test_task_outside_the_installed_apps__fails_clearly_and_is_never_imported(caplog):
    now = timezone.now()
    job = a_task_job(f"{SNEAKY}.sneaky", now)
    with caplog.at_level(logging.WARNING):
        summary = tick(now)
    assert SNEAKY not in sys.modules and "PRESCIENT_SNEAKY_IMPORTED" not in os.environ
    job.refresh_from_db()
    assert job.run_count == 0 and job.failure_count == 1
    assert "not defined by any installed app" in job.last_error and "was not imported" in job.last_error
    # Retried at once, as any task's failed run (not at the next 15-minute slot) ...
    assert job.next_check_at - now < timedelta(seconds=1) and summary.counts["retried"] == 1
    # ... and the failure is logged, naming the job and the reason.
    assert f"job id={job.pk}" in caplog.text and "not defined by any installed app" in caplog.text
    with pytest.raises(TaskResultDoesNotExist, match="not defined by any installed app"):
        default_task_backend.get_result(str(job.pk))
    assert SNEAKY not in sys.modules


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tests.testapp.models.Thing", "is a ModelBase, not a django.tasks Task"),
        ("tests.tasksapp.tasks.no_such_task", "cannot be loaded: AttributeError"),
        ("tests.tasksapp.nope.task", "cannot be loaded: ModuleNotFoundError"),
        ("os.system", "not defined by any installed app"),
        ("nodots", "not defined by any installed app"),
    ],
)
def test_task_path_that_is_not_a_prescient_task__fails_with_what_it_is(path, message):
    now = timezone.now()
    job = a_task_job(path, now)
    tick(now)
    job.refresh_from_db()
    assert job.failure_count == 1 and message in job.last_error
