"""Poison jobs beside ordinary ones, run by real workers (issue #32, item 7): whatever a job's
code raises is charged to that job and every other job runs; a job whose runs end their process
is buried after ``MAX_CRASHES`` in a row; a second signal stops a worker at once and costs the
runs it cuts nothing. (The tick's cases run on SQLite too: tests/runtime/test_poison_processes.py.)"""

from __future__ import annotations

import signal
import time

import pytest

from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.testapp.models import RunLog, Thing

from .conftest import seed, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _poison() -> dict[str, Thing]:
    """One job each of four kinds of poison: SystemExit(0), KeyboardInterrupt, an error handler
    that raises, one that returns a naive datetime."""
    return {
        "exit": seed(1, "fault.poison", name="exit")[0],
        "interrupt": seed(1, "fault.poison", name="interrupt")[0],
        "handler_raises": seed(1, "fault.handler_raises")[0],
        "handler_naive": seed(1, "fault.handler_naive")[0],
    }


@pytest.mark.parametrize("lanes", ["1", "4"])
def test_a_worker_beside_poison_jobs__runs_all_40_others_and_charges_each_poison_job(processes, lanes):
    seed(40, "fault.slow", name="0")
    poison = _poison()
    worker = processes.start("prescient_worker", "--concurrency", "2", "--lanes", lanes)
    seconds = wait_until(
        lambda: JobHistory.objects.filter(job_exec="fault.slow").count() == 40, 30, what="the 40 ordinary jobs"
    )
    wait_until(lambda: JobHistory.objects.filter(job_exec__startswith="fault.handler").count() == 2, 10,
               what="the two jobs whose handler is broken to end")
    assert worker.poll() is None, processes.output(worker)  # still up
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    assert seconds < 20, seconds
    assert set(JobHistory.objects.filter(job_exec="fault.slow").values_list("outcome", flat=True)) == {"completed"}
    # The raising ones: one failed run each, charged, retried at the next slot (not handed back
    # and claimed again: each ran once).
    for name, path in (("exit", "builtins.SystemExit"), ("interrupt", "builtins.KeyboardInterrupt")):
        job = FutureJob.objects.get(entity_key=str(poison[name].pk))
        assert (job.state, job.run_count, job.failure_count) == (State.SCHEDULED, 1, 1), name
        assert job.recent_errors[-1]["exception_class_path"] == path
        assert RunLog.objects.filter(check_name="fault.poison", entity_key=str(poison[name].pk)).count() == 1
    # The broken handlers: the job fails, the reason names the handler.
    raises = JobHistory.objects.get(entity_key=str(poison["handler_raises"].pk))
    assert raises.outcome == Outcome.FAILED and "_raise_handler" in raises.reason
    assert "raised RuntimeError: the handler's own bug" in raises.reason
    naive = JobHistory.objects.get(entity_key=str(poison["handler_naive"].pk))
    assert naive.outcome == Outcome.FAILED and "_naive_handler" in naive.reason and "naive datetime" in naive.reason


def test_a_job_whose_runs_end_their_process__is_buried_after_max_crashes_and_the_worker_goes_on(processes):
    [crash] = seed(1, "fault.crash")
    seed(20, "fault.slow", name="0.05")
    worker = processes.start("prescient_worker", "--concurrency", "2", settings={"MAX_CRASHES": 3})
    wait_until(lambda: FutureJob.objects.filter(state=State.BURIED).exists(), 60, what="the crashing job buried")
    wait_until(lambda: JobHistory.objects.filter(job_exec="fault.slow").count() == 20, 30, what="the others")
    time.sleep(1)  # a buried job is never claimed: give a wrong worker the chance to run it again
    assert worker.poll() is None, processes.output(worker)
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    job = FutureJob.objects.get(entity_key=str(crash.pk))
    assert (job.state, job.run_count, job.failure_count) == (State.BURIED, 3, 3)
    assert RunLog.objects.filter(check_name="fault.crash").count() == 3
    assert job.last_error.startswith("ChildDied: its process exited with code 1")
    assert job.last_error.endswith("ended their process 3 times in a row (MAX_CRASHES): buried")


def test_a_job_whose_runs_end_their_process__is_buried_on_lanes_too(processes):
    [crash] = seed(1, "fault.crash")
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "4", settings={"MAX_CRASHES": 2})
    wait_until(lambda: FutureJob.objects.filter(state=State.BURIED).exists(), 60, what="the crashing job buried")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    job = FutureJob.objects.get(entity_key=str(crash.pk))
    assert (job.state, job.run_count, job.failure_count) == (State.BURIED, 2, 2)
    assert job.last_error.endswith("ended their process 2 times in a row (MAX_CRASHES): buried")


@pytest.mark.parametrize("lanes", ["1", "4"])
def test_a_second_sigint__stops_a_worker_at_once_and_its_cut_run_is_handed_back_uncharged(processes, lanes):
    [long] = seed(1, "fault.long", name="25")
    worker = processes.start("prescient_worker", "--concurrency", "1", "--lanes", lanes,
                             settings={"WORKER_GRACE_SECONDS": 60})
    wait_until(lambda: RunLog.objects.filter(check_name="fault.slow").exists(), 30, what="the long run to start")
    worker.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert worker.poll() is None, "the first Ctrl-C waits for the run (grace period 60 s)"
    worker.send_signal(signal.SIGINT)
    started = time.monotonic()
    assert processes.finish(worker, 30) == 0, processes.output(worker)
    # Not the run's 25 s nor the 60 s grace period: cut at once (bounded loosely, for a loaded machine).
    assert time.monotonic() - started < 15
    job = FutureJob.objects.get(entity_key=str(long.pk))
    assert (job.state, job.reserved_by, job.run_count, job.failure_count) == (State.SCHEDULED, "", 0, 0)
    output = processes.output(worker)
    assert f"job id={job.pk}: its run was cut by a second signal and is handed back uncharged" in output
