"""A SIGKILL soak: two workers over a few thousand jobs, one of them killed every few seconds and
replaced. Nothing is lost, no job runs twice at once, and the only runs repeated are those that
were in flight (claimed by the killed worker) at a kill. Real workers on PostgreSQL, bounded."""

from __future__ import annotations

import itertools
import signal
import time

import pytest

from prescient.models import FutureJob, JobHistory, Worker
from prescient.states import Outcome
from tests.testapp.models import RunLog

from .conftest import runs_per_entity, seed, sigkill_worker, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOBS = 3000
KILLS = 4


def test_two_workers_killed_in_turn__lose_nothing_and_rerun_only_what_was_in_flight(processes):
    seed(JOBS, "fault.slow", name="0.005")
    workers = [processes.start("prescient_worker", "--concurrency", "2") for _ in range(2)]
    wait_until(lambda: Worker.objects.filter(stopped_at=None).count() == 2, 30, what="two workers")
    in_flight_at_kills = 0
    kills: list[float] = []
    for n in range(KILLS):
        wait_until(lambda n=n: RunLog.objects.count() >= (n + 1) * JOBS // (KILLS + 2), 60, what="progress")
        victim = workers[n % 2]
        record = Worker.objects.get(pid=victim.pid)
        sigkill_worker(victim)
        kills.append(time.monotonic())
        # Its children die with it; what it held is what may run again.
        in_flight_at_kills += FutureJob.objects.filter(reserved_by__startswith=f"worker:{record.name}/").count()
        workers[n % 2] = processes.start("prescient_worker", "--concurrency", "2")
    # The killed workers' claims come back when their leases run out (the job's timeout plus a minute).
    wait_until(lambda: JobHistory.objects.count() == JOBS, 150, what="every job to end")
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        assert processes.finish(worker, 30) == 0, processes.output(worker)

    assert not FutureJob.objects.exists()
    assert set(JobHistory.objects.values_list("outcome", flat=True)) == {Outcome.COMPLETED}, "nothing lost"
    runs = runs_per_entity("fault.slow")
    assert len(runs) == JOBS
    repeated = 0
    for logs in runs.values():
        for first, second in itertools.pairwise(logs):
            repeated += 1
            # A run cut short by a kill has no end: its rerun starts after that kill.
            cut_by = first.ended or min((at for at in kills if at >= first.started), default=first.started)
            assert cut_by <= second.started, "two runs of one job at once"
    assert repeated <= in_flight_at_kills, (repeated, in_flight_at_kills)
    charged = JobHistory.objects.filter(failure_count__gt=0).count()
    assert charged <= in_flight_at_kills
