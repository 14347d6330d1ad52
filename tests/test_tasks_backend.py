"""prescient as the django.tasks backend, through Django's public API (Django 6 only).

Tasks are enqueued with ``@task``/``enqueue``/``using`` and read back with ``get_result`` and
``TaskResult.refresh``; ``prescient.tick()`` stands in for the worker (tests/runtime/test_worker_tasks.py
runs real workers).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")

from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

import prescient
from prescient.exceptions import InvalidEntity
from prescient.models import FutureJob, JobHistory
from tests.tasksapp import tasks
from tests.testapp.models import RunLog, Thing

pytestmark = pytest.mark.django_db


def run_due(now=None):
    """What a worker does at ``now`` (default: the real time)."""
    return prescient.tick(now)


def test_backend__declares_its_features():
    assert default_task_backend.supports_defer
    assert default_task_backend.supports_get_result
    assert default_task_backend.supports_priority
    assert default_task_backend.supports_async_task


def test_task__success_keeps_the_json_return_value():
    result = tasks.echo.enqueue(1, (2, 3), name="x")
    assert result.status == TaskResultStatus.READY
    assert isinstance(result.id, str) and len(result.id) < 64
    assert result.args == [1, [2, 3]] and result.kwargs == {"name": "x"}
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"args": [1, [2, 3]], "kwargs": {"name": "x"}}
    assert result.errors == [] and result.attempts == 1 and result.finished_at is not None
    fetched = tasks.echo.get_result(result.id)
    assert fetched.return_value == result.return_value and fetched.started_at is not None


def test_task__failure_has_error_entries_with_class_path_and_traceback():
    result = tasks.boom.using(queue_name="a").enqueue("bad input")
    for attempt in range(3):  # OPTIONS MAX_RETRIES = 2: three runs in all
        run_due(timezone.now() + timedelta(seconds=attempt + 1))
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    assert len(result.errors) == 3
    error = result.errors[-1]
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "bad input" in error.traceback and "Traceback" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018 (reading it raises)


def test_task__retried_then_succeeds_or_fails_by_its_own_max_retries():
    ok = tasks.fails_then_succeeds.enqueue("ok", 1)  # @task(max_retries=1): two runs allowed
    failed = tasks.fails_then_succeeds.enqueue("no", 2)
    run_due()
    ok.refresh()
    assert ok.status == TaskResultStatus.READY and ok.attempts == 1 and len(ok.errors) == 1
    later = timezone.now() + timedelta(seconds=1)  # retried at once (RETRY_DELAY_SECONDS 0), not a slot later
    run_due(later)
    ok.refresh()
    failed.refresh()
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 2 and ok.attempts == 2
    assert failed.status == TaskResultStatus.FAILED and failed.attempts == 2
    assert [e.exception_class_path for e in failed.errors] == ["builtins.RuntimeError"] * 2


def test_task__timeout_stops_the_run_and_fails_it():
    result = tasks.sleeps.enqueue(30)  # @task(timeout_seconds=1, max_retries=0)
    started = timezone.now()
    run_due()
    assert timezone.now() - started < timedelta(seconds=10)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "prescient.exceptions.CheckTimeout"
    assert "timeout of 1s" in result.errors[-1].traceback


def test_task__deferred_does_not_run_before_its_time_and_runs_after():
    at = timezone.now() + timedelta(hours=1, seconds=7)
    result = tasks.add.using(run_after=at).enqueue(2, 3)
    by_delta = tasks.add.using(run_after=timedelta(minutes=10)).enqueue(1, 1)
    run_due()
    result.refresh()
    by_delta.refresh()
    assert result.status == TaskResultStatus.READY and by_delta.status == TaskResultStatus.READY
    assert result.task.run_after == at  # not rounded to a slot
    assert FutureJob.objects.get(pk=result.id).next_check_at == at
    run_due(at - timedelta(seconds=1))
    result.refresh()
    assert result.status == TaskResultStatus.READY
    run_due(at)
    result.refresh()
    by_delta.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert by_delta.status == TaskResultStatus.SUCCESSFUL and by_delta.return_value == 2


def test_task__round_to_slot_option_rounds_run_after_up(settings):
    settings.TASKS = {
        "default": {**settings.TASKS["default"], "OPTIONS": {"ROUND_TO_SLOT": True}},
    }
    at = timezone.now().replace(minute=1, second=0, microsecond=0) + timedelta(hours=1)
    from django.tasks import task_backends

    result = task_backends["default"].enqueue(tasks.add.using(run_after=at), (1, 2), {})
    assert FutureJob.objects.get(pk=result.id).next_check_at == at.replace(minute=15)


def test_enqueue__inside_a_rolled_back_transaction_leaves_no_job():
    with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012 (enqueue, then roll back)
        result = tasks.add.enqueue(1, 2)
        raise RuntimeError("roll back")
    assert not FutureJob.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


def test_get_result__unknown_id_raises():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("123456789")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("not-a-number")


def test_get_result__a_check_job_is_not_a_task_result(make_job):
    job = make_job()
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(job.pk))


def test_task__coroutine_runs():
    result = tasks.async_add.enqueue(20, 22)
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


def test_task__context_knows_the_attempt():
    result = tasks.attempt.enqueue()
    run_due()
    assert tasks.attempt.get_result(result.id).return_value == 1


def test_task__non_json_return_value_is_a_failed_run():
    result = tasks.not_json.enqueue()
    for attempt in range(3):
        run_due(timezone.now() + timedelta(seconds=attempt + 1))
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "builtins.TypeError"


def test_enqueue__refuses_arguments_that_are_not_json():
    with pytest.raises(TypeError, match="JSON"):
        tasks.add.enqueue(object(), 1)
    assert not FutureJob.objects.exists()


def test_task__invalid_options_are_refused():
    with pytest.raises(InvalidTask, match="not valid"):
        tasks.add.using(queue_name="nowhere")
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=timezone.now().replace(tzinfo=None))


def test_signals__enqueued_started_finished_are_sent():
    seen = []

    def on(signal_name):
        def receiver(sender, task_result, **kwargs):
            seen.append((signal_name, task_result.status))

        return receiver

    receivers = {task_enqueued: on("enqueued"), task_started: on("started"), task_finished: on("finished")}
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    try:
        tasks.add.enqueue(1, 2)
        run_due()
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)
    assert seen == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]


def test_task_job__carries_queue_priority_and_arguments_into_history():
    result = tasks.add.using(queue_name="b", priority=7).enqueue(4, 5)
    job = FutureJob.objects.get(pk=result.id)
    assert (job.queue, job.priority, job.payload["args"]) == ("b", 7, [4, 5])
    run_due()
    row = JobHistory.objects.get(job_id=result.id)
    assert (row.queue, row.priority, row.payload["return_value"], row.outcome) == ("b", 7, 9, "completed")
    again = tasks.add.get_result(result.id)
    assert (again.task.queue_name, again.task.priority) == ("b", 7)


def test_schedule__refuses_a_task_as_a_check_for_an_entity():
    thing = Thing.objects.create()
    with pytest.raises(InvalidEntity):
        prescient.schedule(thing, "task:tests.tasksapp.tasks.add")
    assert not RunLog.objects.exists()


def test_admin__shows_task_jobs_beside_checks(admin_client, make_job):
    from django.urls import reverse

    make_job()
    result = tasks.add.using(queue_name="b", priority=7).enqueue(4, 5)
    page = admin_client.get(reverse("admin:prescient_futurejob_changelist")).content.decode()
    assert "add(4, 5)" in page and "queue b · priority 7" in page and "testapp.thing:" in page
    detail = admin_client.get(reverse("admin:prescient_futurejob_change", args=[result.id]))
    assert detail.status_code == 200 and "task:tests.tasksapp.tasks.add" in detail.content.decode()
    run_due()
    row = JobHistory.objects.get(job_id=result.id)
    page = admin_client.get(reverse("admin:prescient_jobhistory_changelist")).content.decode()
    assert "add(4, 5)" in page
    detail = admin_client.get(reverse("admin:prescient_jobhistory_change", args=[row.pk])).content.decode()
    assert "Return value" in detail or "return value" in detail


def test_verbs__kill_and_run_now_work_on_task_jobs():
    later = tasks.add.using(run_after=timedelta(days=1)).enqueue(1, 2)
    prescient.run_now(int(later.id))
    run_due()
    assert tasks.add.get_result(later.id).return_value == 3
    doomed = tasks.add.using(run_after=timedelta(days=1)).enqueue(1, 2)
    prescient.kill(int(doomed.id), "not needed")
    doomed.refresh()
    assert doomed.status == TaskResultStatus.FAILED and doomed.errors == []


def test_admin__retries_a_failed_task_from_history(admin_client, django_user_model):
    from django.urls import reverse

    result = tasks.boom.using(priority=7).enqueue("again")
    for attempt in range(3):
        run_due(timezone.now() + timedelta(seconds=attempt + 1))
    row = JobHistory.objects.get(job_id=int(result.id))
    assert row.outcome == "failed"
    check_row = JobHistory.objects.create(
        job_id=999999, entity_name="testapp.thing", entity_key="1", job_exec="test.record", outcome="completed",
        first_check_at=timezone.now(), created_at=timezone.now(), finished_at=timezone.now(),
    )
    url = reverse("admin:prescient_jobhistory_changelist")

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_jobhistory"))
    from django.test import Client

    client = Client()
    client.force_login(viewer)
    client.post(url, {"action": "rerun_jobs", "_selected_action": [row.pk]})
    assert not FutureJob.objects.exists(), "running a job again needs the permission to add jobs"

    response = admin_client.post(
        url, {"action": "rerun_jobs", "_selected_action": [row.pk, check_row.pk]}, follow=True
    )
    texts = [str(m) for m in response.context["messages"]]
    job = FutureJob.objects.get(kind="task")
    assert any(t.startswith("Created 2 jobs:") and str(job.pk) in t for t in texts), texts
    assert job.rerun_of == row.pk
    assert FutureJob.objects.get(kind="check").rerun_of == check_row.pk  # a check runs again too
    assert job.pk != int(result.id)
    assert (job.job_exec, job.priority, job.payload["args"]) == (row.job_exec, 7, ["again"])
    retried = tasks.boom.get_result(str(job.pk))
    assert retried.status == TaskResultStatus.READY and retried.args == ["again"]


def _listener():
    import psycopg
    from django.db import connection

    settings = connection.settings_dict
    listener = psycopg.connect(
        dbname=settings["NAME"], user=settings.get("USER") or None, host=settings.get("HOST") or None,
        port=settings.get("PORT") or None, autocommit=True,
    )
    listener.execute("LISTEN prescient_due")
    return listener


@pytest.mark.postgres
def test_enqueue__wakes_listening_workers_in_one_statement(transactional_db, django_assert_num_queries):
    listener = _listener()
    try:
        with django_assert_num_queries(1):  # the job and its wake-up: one round trip in autocommit
            result = tasks.add.enqueue(1, 2)
        received = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.channel for n in received] == ["prescient_due"]
        assert FutureJob.objects.filter(pk=result.id).exists()
    finally:
        listener.close()


@pytest.mark.postgres
def test_enqueue__in_a_rolled_back_transaction_wakes_nobody(transactional_db):
    listener = _listener()
    try:
        with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012 (enqueue, then roll back)
            tasks.add.enqueue(1, 2)
            raise RuntimeError("roll back")
        tasks.add.enqueue(3, 4)  # the only wake-up sent
        received = list(listener.notifies(timeout=2))
        assert len(received) == 1
        assert FutureJob.objects.count() == 1
    finally:
        listener.close()


def test_enqueue__a_refused_row_leaves_the_callers_transaction_usable():
    """A job the database refuses (here a NUL in its arguments on PostgreSQL, or a clash with
    a pending job everywhere) raises, and the caller's transaction goes on."""
    from django.db import IntegrityError

    from prescient.engine import store

    with transaction.atomic():
        first = tasks.add.enqueue(1, 2)
        job = FutureJob.objects.get(pk=first.id)
        clash = FutureJob(**{f.attname: getattr(job, f.attname) for f in FutureJob._meta.concrete_fields
                             if not f.primary_key})
        with pytest.raises(IntegrityError):
            store.insert(clash, wake=True)
        second = tasks.add.enqueue(3, 4)  # the transaction is still usable
    assert set(FutureJob.objects.values_list("pk", flat=True)) == {int(first.id), int(second.id)}
