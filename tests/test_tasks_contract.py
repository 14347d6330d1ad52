"""django.tasks as Django documents it: the points on which Django's own ``tests/tasks`` and
django-tasks-db's suite, run against the backend, found it wrong (#32 item 3), each through
Django's public API.

``prescient.tick()`` stands in for the worker where the point is how a run ends; real
``prescient_worker`` processes where it is a task while it runs, or a worker beside a task that
misbehaves. docs/tasks.md says how the backend fares on Django's own tests/tasks.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

pytest.importorskip("django.tasks")

from asgiref.sync import async_to_sync, sync_to_async
from django.tasks import TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_finished, task_started
from django.utils import timezone

import prescient
from prescient.engine import store, sweep
from prescient.engine.decisions import TickSummary
from prescient.exceptions import CheckTimeout, ChildDied
from prescient.models import FutureJob, JobHistory
from tests.conftest import ROOT
from tests.runtime.test_worker import Workers, wait_until
from tests.tasksapp import tasks

pytestmark = pytest.mark.django_db

FAILED, SUCCESSFUL = TaskResultStatus.FAILED, TaskResultStatus.SUCCESSFUL
READY, RUNNING = TaskResultStatus.READY, TaskResultStatus.RUNNING


def run_due(now=None):
    """What a worker does at ``now`` (default: the database's time)."""
    return prescient.tick(now)


def refreshed(*results):
    for result in results:
        result.refresh()
    return results


# --- 1. finished_at is when the run finished ---------------------------------------------------


def test_finished_at__is_when_the_run_ended_even_when_its_batch_is_dated_before_it():
    """The batch's time (the history row's ``finished_at``) may come before its runs even
    started; a result's ``finished_at`` is when its own run ended, on the clock of its start."""
    slow = tasks.record.enqueue("slow", 0.2)
    failing = tasks.exits.enqueue("bye")
    batch_time = failing.enqueued_at  # before either run started
    run_due(batch_time)
    refreshed(slow, failing)
    assert JobHistory.objects.get(job_id=slow.id).finished_at == batch_time
    for result in (slow, failing):
        assert result.status in (SUCCESSFUL, FAILED)
        assert result.enqueued_at <= result.started_at == result.last_attempted_at <= result.finished_at
    assert slow.finished_at - slow.started_at >= timedelta(seconds=0.2), "the run slept 0.2 s"


def test_finished_at__task_finished_reports_the_times_that_get_result_reads_back():
    announced = []

    def receiver(sender, task_result, **kwargs):
        announced.append(task_result)

    task_finished.connect(receiver, dispatch_uid="contract")
    try:
        result = tasks.add.enqueue(1, 2)
        run_due()
    finally:
        task_finished.disconnect(dispatch_uid="contract")
    fetched = tasks.add.get_result(result.id)
    (sent,) = announced
    times = ("started_at", "last_attempted_at", "finished_at", "worker_ids", "status", "return_value")
    assert {name: getattr(sent, name) for name in times} == {name: getattr(fetched, name) for name in times}


def test_finished_at__of_a_task_killed_between_runs_is_when_it_was_killed():
    result = tasks.fails_then_succeeds.enqueue("killed", 5)  # max_retries=1: retried once
    run_due()
    result.refresh()
    assert result.status == READY and result.attempts == 1
    killed_at = result.started_at + timedelta(minutes=5)
    prescient.kill(int(result.id), "not needed", now=killed_at)
    result.refresh()
    assert result.status == FAILED
    assert result.started_at <= result.finished_at == killed_at


def test_finished_at__of_a_run_whose_process_died_is_its_start_plus_the_time_it_ran():
    """A run its worker's supervisor charges (its process died, or was killed overrunning) is
    dated from its start, by the time the supervisor saw it run, and announced."""
    announced = []

    def receiver(sender, task_result, **kwargs):
        announced.append(task_result)

    task_finished.connect(receiver, dispatch_uid="died")
    try:
        result = tasks.sleeps.enqueue(30)  # max_retries=0
        token = "worker:contract:1/1"
        (job,) = store.claim(timezone.now(), 1, token, start=True)
        decision = sweep.failed_run(job, ChildDied("its process exited with code -9"), timezone.now(), 1.5)
        store.settle([decision], token, timezone.now(), TickSummary())
    finally:
        task_finished.disconnect(dispatch_uid="died")
    result.refresh()
    assert (result.status, result.started_at) == (FAILED, job.run_started_at)
    assert result.finished_at == result.started_at + timedelta(seconds=1.5)
    assert result.errors[-1].exception_class_path == "prescient.exceptions.ChildDied"
    assert result.errors[-1].traceback == "ChildDied: its process exited with code -9\n"
    assert [(r.status, r.finished_at) for r in announced] == [(FAILED, result.finished_at)]


# --- 2. a running task shows its run from the statement that starts it ------------------------


def test_get_result__shows_a_run_from_the_statement_that_starts_it():
    """Nothing is written for it: the row's ``run_started_at`` and ``reserved_by``, written by
    the start, are its start and worker id (so no other kind of job pays for it)."""
    result = tasks.add.enqueue(1, 2)
    token = "worker:contract:1/1"
    (claimed,) = store.claim(timezone.now(), 1, token)
    assert tasks.add.get_result(result.id).status == READY, "claimed, but its run has not started"
    store.start_runs([claimed], token)
    job = FutureJob.objects.get(pk=result.id)
    running = tasks.add.get_result(result.id)
    assert running.status == RUNNING
    assert running.started_at == running.last_attempted_at == job.run_started_at
    assert (running.worker_ids, running.attempts, running.finished_at) == ([token], 1, None)


# --- 3. SystemExit and KeyboardInterrupt are failed runs --------------------------------------


def test_system_exit__in_a_task_fails_it_and_its_batch_goes_on():
    exiting = tasks.exits.enqueue("bye")  # max_retries=0
    other = tasks.add.enqueue(1, 2)
    run_due()
    refreshed(exiting, other)
    assert (exiting.status, exiting.attempts, other.return_value) == (FAILED, 1, 3)
    (error,) = exiting.errors
    assert error.exception_class_path == "builtins.SystemExit" and error.exception_class is SystemExit
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert "in exits\n    raise SystemExit(message)" in error.traceback
    assert error.traceback.endswith("SystemExit: bye\n")


def test_keyboard_interrupt__in_a_task_is_a_failed_attempt_then_retried():
    result = tasks.interrupts_itself.enqueue("stop")  # max_retries=1
    run_due()
    result.refresh()
    assert (result.status, result.attempts) == (READY, 1)
    assert [e.exception_class_path for e in result.errors] == ["builtins.KeyboardInterrupt"]
    run_due(timezone.now() + timedelta(seconds=1))
    result.refresh()
    assert (result.status, result.attempts) == (FAILED, 2)
    assert [e.exception_class for e in result.errors] == [KeyboardInterrupt, KeyboardInterrupt]
    assert result.errors[-1].traceback.endswith("KeyboardInterrupt: stop\n")


# --- 4. the task as enqueued, in the run and in the signals ------------------------------------


def test_the_task_as_enqueued__is_the_one_the_run_and_the_signals_see():
    seen = {}

    def on(name):
        def receiver(sender, task_result, **kwargs):
            seen[name] = (task_result.task.queue_name, task_result.task.priority)

        return receiver

    started, finished = on("started"), on("finished")
    task_started.connect(started, dispatch_uid="contract-started")
    task_finished.connect(finished, dispatch_uid="contract-finished")
    try:
        result = tasks.sees_itself.using(queue_name="b", priority=7).enqueue()
        run_due()
    finally:
        task_started.disconnect(dispatch_uid="contract-started")
        task_finished.disconnect(dispatch_uid="contract-finished")
    result.refresh()
    assert seen == {"started": ("b", 7), "finished": ("b", 7)}
    assert result.task == tasks.sees_itself.using(queue_name="b", priority=7)
    assert result.return_value == {
        "queue": "b", "priority": 7, "status": "RUNNING", "started_at": result.started_at.isoformat(),
        "last_attempted_at": result.last_attempted_at.isoformat(), "worker_ids": result.worker_ids, "attempt": 1,
    }


# --- 5. task_finished sent as Django's backends send it ----------------------------------------


def _django_log(caplog):
    return [record for record in caplog.records if record.name == "django.tasks"]


def test_django_log__of_a_failed_task_names_its_exception_once_at_the_end(caplog):
    caplog.set_level(logging.DEBUG, logger="django.tasks")
    result = tasks.boom.enqueue("bad input")  # MAX_RETRIES 2: three runs
    for attempt in range(3):
        run_due(timezone.now() + timedelta(seconds=attempt + 1))
    path = "tests.tasksapp.tasks.boom"
    lines = [record.getMessage() for record in _django_log(caplog)]
    assert lines == [
        f"Task id={result.id} path={path} enqueued backend=default",
        *[f"Task id={result.id} path={path} state=RUNNING"] * 3,
        f"Task id={result.id} path={path} state=FAILED",
    ]
    failed = _django_log(caplog)[-1]
    assert failed.levelno == logging.ERROR
    assert failed.exc_info[0] is ValueError and str(failed.exc_info[1]) == "bad input"


def test_django_log__of_a_timeout_names_check_timeout(caplog):
    caplog.set_level(logging.INFO, logger="django.tasks")
    tasks.sleeps.enqueue(30)  # timeout_seconds=1, max_retries=0
    run_due()
    failed = _django_log(caplog)[-1]
    assert "state=FAILED" in failed.getMessage() and failed.exc_info[0] is CheckTimeout


def test_a_task_started_receiver_that_exits__fails_that_run_only():
    trapped = tasks.trapped_at_start.enqueue()
    other = tasks.add.enqueue(2, 2)
    run_due()
    refreshed(trapped, other)
    assert (trapped.status, other.return_value) == (FAILED, 4)
    assert trapped.errors[-1].exception_class_path == "builtins.SystemExit"
    assert trapped.errors[-1].traceback.endswith("SystemExit: a task_started receiver exits\n")


def test_a_task_finished_receiver_that_interrupts__is_logged_and_the_outcome_stands(caplog):
    trapped = tasks.trapped_at_finish.enqueue()
    other = tasks.add.enqueue(2, 3)
    run_due()
    refreshed(trapped, other)
    assert (trapped.status, trapped.return_value, trapped.attempts) == (SUCCESSFUL, "done", 1)
    assert other.return_value == 5
    assert any(
        "a task_finished receiver raised KeyboardInterrupt: a task_finished receiver interrupts" in r.getMessage()
        for r in caplog.records
    )


# --- TaskError.traceback --------------------------------------------------------------------


def test_task_error__traceback_is_the_whole_traceback():
    result = tasks.boom.enqueue("bad input")
    for attempt in range(3):
        run_due(timezone.now() + timedelta(seconds=attempt + 1))
    result.refresh()
    for error in result.errors:
        assert error.traceback.startswith("Traceback (most recent call last):\n")
        assert "in boom\n    raise ValueError(message)" in error.traceback
        assert error.traceback.endswith("ValueError: bad input\n")


def test_task_error__of_a_timeout_shows_where_the_run_was_stopped():
    result = tasks.sleeps.enqueue(30)
    run_due()
    result.refresh()
    text = result.errors[-1].traceback
    assert text.startswith("Traceback (most recent call last):\n")
    assert "in sleeps\n    time.sleep(seconds)" in text
    assert text.endswith("ran longer than its timeout of 1s\n")


# --- results from async code -----------------------------------------------------------------


def test_async_api__reads_results_from_async_code():
    """Results live in the database: from async code they are read with Django's async API
    (a sync get_result or refresh there is refused by Django: SynchronousOnlyOperation)."""

    async def scenario():
        result = await tasks.add.aenqueue(2, 3)
        with pytest.raises(TaskResultDoesNotExist):
            await tasks.add.aget_result("123456789")
        await sync_to_async(prescient.tick)()
        await result.arefresh()
        return result, await tasks.add.aget_result(result.id)

    result, fetched = async_to_sync(scenario)()
    assert (result.status, result.return_value) == (SUCCESSFUL, 5)
    assert fetched == result


# --- backend.check() -------------------------------------------------------------------------


NO_APP_SETTINGS = """
SECRET_KEY = "contract"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TASKS = {"default": {"BACKEND": "prescient.tasks.PrescientBackend"}}
"""


def _without_prescient(tmp_path, *args):
    (tmp_path / "noapp_settings.py").write_text(NO_APP_SETTINGS)
    shop = tmp_path / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "apps.py").write_text(textwrap.dedent("""
        from django.apps import AppConfig

        class ShopConfig(AppConfig):
            name = "shop"

            def ready(self):
                from . import tasks  # noqa: F401 (its tasks are defined at start-up)
    """))
    (shop / "tasks.py").write_text("from django.tasks import task\n\n@task\ndef hello():\n    return 1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, *args], check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def test_check__says_when_prescient_is_not_in_installed_apps(tmp_path):
    done = _without_prescient(tmp_path, "-m", "django", "check", "--settings=noapp_settings")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(prescient.E023) TASKS['default'] is prescient's backend, but 'prescient' is not in INSTALLED_APPS" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_enqueue__without_prescient_installed_raises_improperly_configured(tmp_path):
    code = "import django; django.setup(); from shop.tasks import hello; hello.enqueue()"
    env_settings = f"import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'noapp_settings'; {code}"
    done = _without_prescient(tmp_path, "-c", env_settings)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: TASKS['default'] is prescient's backend")


# --- with real workers -----------------------------------------------------------------------


@pytest.fixture
def workers(tmp_path):
    pool = Workers(tmp_path)
    yield pool
    pool.cleanup()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker__a_running_task_shows_its_start_and_worker_id_while_it_runs(workers, tmp_path):
    gate = tmp_path / "gate"
    result = tasks.waits_for.enqueue(str(gate))
    proc = workers.start("--concurrency", "1")
    try:
        wait_until(lambda: tasks.waits_for.get_result(result.id).status == RUNNING, 30, what="task running")
        running = tasks.waits_for.get_result(result.id)
        job = FutureJob.objects.get(pk=result.id)
        assert running.started_at == running.last_attempted_at == job.run_started_at
        assert running.worker_ids == [job.reserved_by] and job.reserved_by.startswith("worker:")
        assert running.finished_at is None
    finally:
        gate.touch()
    wait_until(lambda: tasks.waits_for.get_result(result.id).status == SUCCESSFUL, 30, what="task finished")
    done = tasks.waits_for.get_result(result.id)
    assert (done.started_at, done.worker_ids) == (running.started_at, running.worker_ids)
    assert done.started_at <= done.finished_at
    proc.send_signal(signal.SIGTERM)
    assert workers.finish(proc, 30) == 0, workers.output(proc)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker__goes_on_beside_tasks_and_receivers_that_exit_or_interrupt(workers):
    results = {
        "exits": tasks.exits.enqueue("bye"),
        "interrupts": tasks.interrupts_itself.enqueue("stop"),
        "trapped_at_start": tasks.trapped_at_start.enqueue(),
        "trapped_at_finish": tasks.trapped_at_finish.enqueue(),
        "ordinary": [tasks.add.enqueue(i, i) for i in range(5)],
    }
    proc = workers.start("--concurrency", "2")
    wait_until(lambda: JobHistory.objects.count() == 9, 60, what="every task ended")
    assert proc.poll() is None, workers.output(proc)
    proc.send_signal(signal.SIGTERM)
    assert workers.finish(proc, 30) == 0, workers.output(proc)
    exits, interrupts, at_start, at_finish = refreshed(
        results["exits"], results["interrupts"], results["trapped_at_start"], results["trapped_at_finish"]
    )
    assert [r.return_value for r in refreshed(*results["ordinary"])] == [0, 2, 4, 6, 8]
    assert (exits.status, exits.errors[-1].exception_class_path) == (FAILED, "builtins.SystemExit")
    assert (interrupts.status, interrupts.attempts) == (FAILED, 2)
    assert interrupts.errors[-1].exception_class_path == "builtins.KeyboardInterrupt"
    assert (at_start.status, at_start.errors[-1].exception_class_path) == (FAILED, "builtins.SystemExit")
    assert (at_finish.status, at_finish.return_value) == (SUCCESSFUL, "done")
    for result in (exits, interrupts, at_start, at_finish):
        assert result.started_at <= result.finished_at
