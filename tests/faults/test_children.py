"""A worker's children claim, run and settle for themselves: what happens when one is killed, is
stuck in C code, or loses its database connection, and what pause, kill and sleep do to jobs
that are reserved (claimed, not started) or running. Real workers on PostgreSQL; checks that
block until the test lets them go, never a sleep as timing."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.testapp.models import RunLog, Thing

from .conftest import children_of, runs_per_entity, seed, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_sigkill_of_a_child_mid_parcel__charges_at_most_its_run_in_flight_and_the_worker_goes_on(processes):
    seed(300, "fault.slow", name="0.02")
    worker = processes.start("prescient_worker", "--concurrency", "2")
    wait_until(lambda: RunLog.objects.count() >= 40, 60, what="the children to be busy")
    wait_until(lambda: len(children_of(worker.pid)) >= 2, 10, what="two children")
    os.kill(children_of(worker.pid)[0], signal.SIGKILL)
    killed_at = time.monotonic()
    # The worker charges the run in flight (retried at the next slot) and hands back the rest of
    # that child's claim; a fresh child takes its place and the drain goes on.
    pending = FutureJob.objects.filter(reserved_by="", failure_count__gt=0)
    wait_until(lambda: JobHistory.objects.count() + pending.count() == 300, 90, what="the drain to end")
    charged = list(pending)
    for job in charged:
        assert job.last_error.startswith("ChildDied:"), job.last_error
        prescient.run_now(job)
    wait_until(lambda: JobHistory.objects.count() == 300, 30, what="the charged run to run again")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    assert len(charged) <= 1, "only the run in flight is charged"
    rows = JobHistory.objects.all()
    assert {row.outcome for row in rows} == {Outcome.COMPLETED}
    assert sum(row.failure_count for row in rows) == len(charged), "the rest of the parcel was charged nothing"
    runs = runs_per_entity("fault.slow")
    assert len(runs) == 300, "no job lost"
    for logs in runs.values():  # a run cut short by the kill, run again after it; never two at once
        assert len(logs) <= 2
        if len(logs) == 2:
            first, second = logs
            assert (first.ended or killed_at) <= second.started, "two runs of one job at once"


def test_a_child_stuck_in_c_code_past_its_timeout__is_killed_charged_and_the_rest_runs(processes):
    (stuck,) = seed(1, "fault.in_c")
    others = seed(20, "fault.slow", name="0.01")
    worker = processes.start("prescient_worker", "--concurrency", "1")
    job = FutureJob.objects.get(entity_key=str(stuck.pk))
    wait_until(
        lambda: FutureJob.objects.filter(pk=job.pk, failure_count=1, reserved_by="").exists()
        and JobHistory.objects.count() == len(others),
        60, what="the stuck run killed and the others done",
    )
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    row = FutureJob.objects.get(pk=job.pk)
    assert row.last_error.startswith("CheckTimeout") and "killed" in row.last_error, row.last_error
    assert (row.state, row.run_count) == (State.SCHEDULED, 1)
    assert RunLog.objects.filter(check_name="fault.in_c").count() == 1
    assert len(runs_per_entity("fault.slow")) == len(others)


def _terminate_other_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def test_a_childs_connection_terminated_by_the_server__costs_no_job_anything(processes, tmp_path):
    """The children reconnect and go on: results computed before the drop are written after the
    reconnect (not run again), runs not started are handed back, nothing is charged."""
    seed(400, "fault.quiet", name=f"{tmp_path}|0.01")
    worker = processes.start("prescient_worker", "--concurrency", "2")
    wait_until(lambda: len(list(tmp_path.iterdir())) >= 40, 60, what="the children to be busy")
    terminated = 0
    for _ in range(5):  # a few drops during the drain
        terminated += _terminate_other_backends()
        done = len(list(tmp_path.iterdir()))
        wait_until(lambda done=done: len(list(tmp_path.iterdir())) >= min(400, done + 30), 60, what="progress")
    wait_until(lambda: JobHistory.objects.count() == 400, 90, what="every job to end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    assert terminated >= 5
    rows = JobHistory.objects.all()
    assert {row.outcome for row in rows} == {Outcome.COMPLETED}
    assert sum(row.failure_count for row in rows) == 0, "a dropped connection charged a job"
    runs = {path.name: path.read_text().splitlines() for path in tmp_path.iterdir() if path.name.isdigit()}
    assert len(runs) == 400, "no job lost"
    assert max(len(lines) for lines in runs.values()) == 1, "a result computed before the drop was run again"


# --- commands to reserved and to running jobs ------------------------------------------------------


def gated(tmp_path: Path, count: int, status: str = "") -> list[FutureJob]:
    things = seed(count, "fault.gate", name=str(tmp_path))
    if status:
        Thing.objects.filter(pk__in=[t.pk for t in things]).update(status=status)
    return [FutureJob.objects.get(entity_key=str(t.pk)) for t in things]


def open_gate(tmp_path: Path, job: FutureJob) -> None:
    (tmp_path / job.entity_key).touch()


@pytest.mark.parametrize("command", ["pause", "kill", "sleep"])
def test_a_command_to_a_reserved_job__takes_it_back_at_once_and_its_check_never_runs(processes, tmp_path, command):
    # One child with a prefetch of 2: the first job runs (held at its gate), two wait reserved.
    first, second, third = gated(tmp_path, 3)
    worker = processes.start("prescient_worker", "--concurrency", "1", settings={"WORKER_PREFETCH": 2})
    wait_until(lambda: FutureJob.objects.filter(state=State.RUNNING).exists(), 30, what="the first run")
    wait_until(lambda: FutureJob.objects.filter(state=State.RESERVED).count() == 2, 30, what="two reserved")
    (running,) = FutureJob.objects.filter(state=State.RUNNING)
    target = FutureJob.objects.filter(state=State.RESERVED).order_by("-next_check_at", "-pk").first()
    assert target is not None
    if command == "sleep":
        slept = prescient.sleep(target, target.next_check_at + timedelta(hours=6))
    elif command == "pause":
        assert prescient.pause(job=target) == 1
    elif command == "kill":
        assert prescient.kill(target, "not wanted") == "ended"
    row = FutureJob.objects.filter(pk=target.pk).first()
    if command == "kill":
        assert row is None and JobHistory.objects.get(job_id=target.pk).outcome == Outcome.KILLED
    else:
        assert (row.state, row.reserved_by, row.check_count, row.failure_count, row.run_count) == (
            State.PAUSED if command == "pause" else State.SCHEDULED, "", 0, 0, 0
        )
        assert command != "sleep" or row.next_check_at == slept.next_check_at
    for job in (first, second, third):
        open_gate(tmp_path, job)
    wait_until(lambda: not FutureJob.objects.exclude(pk=target.pk).exists(), 30, what="the others to end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    assert not RunLog.objects.filter(entity_key=target.entity_key).exists(), "its check ran"
    assert RunLog.objects.filter(entity_key=running.entity_key).count() == 1


@pytest.mark.parametrize("command", ["pause", "kill", "sleep"])
def test_a_command_to_a_running_job__applies_when_its_run_returns(processes, tmp_path, command):
    (job,) = gated(tmp_path, 1, status="again")  # asks for a re-check in an hour when let go
    worker = processes.start("prescient_worker", "--concurrency", "1")
    wait_until(lambda: RunLog.objects.filter(check_name="fault.gate").exists(), 30, what="the run to start")
    assert FutureJob.objects.get(pk=job.pk).state == State.RUNNING
    at = job.next_check_at + timedelta(hours=5)
    if command == "pause":
        assert prescient.pause(job=job) == 1
    elif command == "kill":
        assert prescient.kill(job, "not wanted") == "requested"
    else:
        prescient.sleep(job, at)
    open_gate(tmp_path, job)
    wait_until(lambda: not FutureJob.objects.filter(pk=job.pk).exclude(reserved_by="").exists(), 30, what="the end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    log = RunLog.objects.get(entity_key=job.entity_key)
    assert log.ended is not None, "the running check ran to its end"
    row = FutureJob.objects.filter(pk=job.pk).first()
    if command == "kill":
        assert row is None and JobHistory.objects.get(job_id=job.pk).outcome == Outcome.KILLED
    elif command == "pause":  # its re-check kept, still paused
        assert (row.state, row.last_state, row.check_count, row.run_count) == (State.PAUSED, State.SCHEDULED, 1, 1)
    else:  # its result discarded, due when asked
        assert (row.state, row.run_count) == (State.SCHEDULED, 1)
        assert row.next_check_at >= at
