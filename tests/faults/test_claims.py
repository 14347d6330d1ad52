"""Claims no larger than the runners, leases from each job's timeout, runs that cannot hang
the loop, and limits per child: with real workers and ticks on PostgreSQL."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.testapp.models import RunLog

from .conftest import runs_per_entity, seed, sigkill_worker, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_sigkill_of_a_worker_over_2000_jobs__charges_and_reruns_only_the_runs_in_flight(processes):
    seed(2000, "fault.slow", name="0.005")
    victim = processes.start("prescient_worker", "--concurrency", "2")
    wait_until(lambda: RunLog.objects.count() >= 300, 60, what="the victim to be busy")
    sigkill_worker(victim)
    killed_at = time.monotonic()
    held = FutureJob.objects.exclude(reserved_by="")
    started = set(held.exclude(run_started_at=None).values_list("pk", flat=True))
    unstarted = held.filter(run_started_at=None).count()
    # Claims no larger than the runners: at most one claim per child is not yet started.
    assert unstarted <= 2
    survivor = processes.start("prescient_worker", "--concurrency", "2")
    wait_until(lambda: JobHistory.objects.count() == 2000, 120, what="every job to end")
    survivor.send_signal(signal.SIGTERM)
    assert processes.finish(survivor, 30) == 0

    rows = JobHistory.objects.all()
    assert {row.outcome for row in rows} == {Outcome.COMPLETED}
    charged = {row.job_id for row in rows if row.failure_count}
    assert charged == started, "only the runs that had started were charged"
    assert all("worker lost" in row.last_error for row in rows if row.failure_count)
    runs = runs_per_entity("fault.slow")
    assert len(runs) == 2000
    keys = {row.job_id: row.entity_key for row in rows}
    for logs in runs.values():
        assert len(logs) in (1, 2)
        if len(logs) == 2:  # a run in flight at the kill, run again afterwards, never at the same time
            first, second = logs
            assert first.started < killed_at <= second.started
    assert {key for key, logs in runs.items() if len(logs) == 2} <= {keys[pk] for pk in started}


def test_kill_and_pause_of_jobs_claimed_but_not_started__they_never_start(processes):
    """A worker with one child and a prefetch of 4 holds claims it has not started (``reserved``);
    killed or paused meanwhile, they are taken back at once and never run."""
    things = seed(6, "fault.slow", name="1.0")
    worker = processes.start("prescient_worker", "--concurrency", "1", settings={"WORKER_PREFETCH": 4})
    held = FutureJob.objects.exclude(reserved_by="")
    wait_until(lambda: held.count() >= 5 and held.exclude(run_started_at=None).exists(), 30, what="claims")
    waiting = list(held.filter(run_started_at=None).order_by("next_check_at", "pk"))
    assert len(waiting) >= 3, "claimed, not started"
    killed, paused = waiting[-1], waiting[-2]  # the last in the worker's line: seconds from their turn
    assert {FutureJob.objects.get(pk=job.pk).state for job in (killed, paused)} == {State.RESERVED}
    assert prescient.kill(killed, "not wanted") == "ended"  # reserved: its code never runs
    assert prescient.pause(job=paused) == 1
    wait_until(lambda: JobHistory.objects.count() >= 5, 30, what="the rest to end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    ran = {log.entity_key for log in RunLog.objects.all()}
    assert killed.entity_key not in ran and paused.entity_key not in ran
    assert JobHistory.objects.get(job_id=killed.pk).outcome == Outcome.KILLED
    row = FutureJob.objects.get(pk=paused.pk)
    assert (row.state, row.last_state, row.reserved_by, row.run_count, row.failure_count) == (
        State.PAUSED, State.SCHEDULED, "", 0, 0
    )
    assert len(things) == 6


def test_kill_and_pause_in_a_ticks_batch__they_never_start(processes):
    seed(5, "fault.slow", name="1.0")
    tick = processes.start("prescient_tick", "--batch-size", "5")
    wait_until(lambda: RunLog.objects.count() >= 1, 30, what="the first run")
    later = list(FutureJob.objects.filter(run_started_at=None).exclude(reserved_by="").order_by("pk"))
    assert len(later) >= 3
    prescient.kill(later[-1], "not wanted")
    prescient.pause(job=later[-2])
    assert processes.finish(tick, 30) == 0, processes.output(tick)
    ran = {log.entity_key for log in RunLog.objects.all()}
    assert later[-1].entity_key not in ran and later[-2].entity_key not in ran
    assert JobHistory.objects.get(job_id=later[-1].pk).outcome == Outcome.KILLED
    assert FutureJob.objects.get(pk=later[-2].pk).state == State.PAUSED


def test_a_run_longer_than_the_stale_period__is_not_buried(processes):
    """A check with a timeout of its own (30 s) far past the stale period (4 s here, as the
    120 s timeout is past the default 120 s): a tick runs it for 8 s while another process reaps
    every half second. Its lease follows its timeout and is renewed: it is never buried."""
    seed(1, "fault.long", name="8")
    tick = processes.start("prescient_tick")
    deadline = time.monotonic() + 40
    while tick.poll() is None and time.monotonic() < deadline:
        processes.finish(processes.start("prescient_reap"), 30)
        time.sleep(0.5)
    assert processes.finish(tick, 5) == 0, processes.output(tick)
    row = JobHistory.objects.get()
    assert (row.outcome, row.failure_count, row.run_count) == (Outcome.COMPLETED, 0, 1)


def test_a_tick_with_a_check_that_ignores_sigalrm__ends_within_its_timeout_plus_seconds(processes):
    [stuck] = seed(1, "fault.ignore_alarm", name="x")
    seed(3, "fault.slow", name="0", due_in=-timedelta(minutes=30))
    started = time.monotonic()
    tick = processes.start("prescient_tick")
    status = processes.finish(tick, 30)
    took = time.monotonic() - started
    assert status == 3, processes.output(tick)  # ended by its watchdog
    assert took < 1 + 2 + 8, f"took {took:.1f}s"  # its timeout (1 s), the grace (2 s), start-up
    row = FutureJob.objects.get(entity_key=str(stuck.pk))
    assert row.state == State.SCHEDULED and row.failure_count == 1 and "did not stop" in row.last_error
    assert not FutureJob.objects.exclude(reserved_by="").exists()  # nothing left claimed or buried
    assert not FutureJob.objects.filter(state=State.BURIED).exists()


def test_a_2_gb_allocation_with_child_memory_512__is_a_failed_run_and_the_worker_goes_on(processes):
    [big] = seed(1, "fault.allocate", name="2048")
    seed(5, "fault.slow", name="0")
    worker = processes.start("prescient_worker", settings={"CHILD_MEMORY_MB": 512})
    wait_until(lambda: JobHistory.objects.count() == 6, 60, what="every job to end")
    assert worker.poll() is None, processes.output(worker)
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    row = JobHistory.objects.get(entity_key=str(big.pk))
    assert row.outcome == Outcome.FAILED and row.last_error.startswith("MemoryError")
    assert "512 MB" in row.last_error
    assert JobHistory.objects.filter(outcome=Outcome.COMPLETED).count() == 5
