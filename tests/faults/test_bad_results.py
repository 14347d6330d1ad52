"""Checks and tasks that produce what PostgreSQL refuses, run by real workers and ticks.

The worker and the tick stay up, every other job's result is written, and the bad job's error
is stored cleaned (tests/engine/test_bad_results.py has the same cases in process).
"""

from __future__ import annotations

import signal

import pytest

from prescient.cleaning import ERROR_LIMIT
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from tests.testapp.models import Thing

from .conftest import seed, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BAD = ["nul", "surrogate", "huge", "max"]


def _seed_bad_among_good() -> dict[str, Thing]:
    seed(40, "fault.slow", name="0")
    return {name: seed(1, "fault.bad", name=name)[0] for name in BAD}


def _assert_written(bad: dict[str, Thing]) -> None:
    assert set(JobHistory.objects.filter(job_exec="fault.slow").values_list("outcome", flat=True)) == {
        Outcome.COMPLETED
    }
    assert JobHistory.objects.filter(job_exec="fault.slow").count() == 40
    for name, thing in bad.items():
        row = JobHistory.objects.get(entity_key=str(thing.pk))
        assert row.outcome == Outcome.FAILED and row.run_count == 1, name
        assert "\x00" not in row.last_error and len(row.last_error) <= ERROR_LIMIT, name
        expected = {"nul": "bad\\x00text", "surrogate": "bad\\udc80text", "huge": "characters cut",
                    "max": "OverflowError"}[name]
        assert expected in row.last_error, (name, row.last_error[:200])
    assert not FutureJob.objects.exists()


def test_a_worker__stays_up_and_writes_every_other_result(processes):
    bad = _seed_bad_among_good()
    worker = processes.start("prescient_worker", "--concurrency", "2")
    wait_until(lambda: JobHistory.objects.count() == 40 + len(BAD), 60, what="every job to end")
    assert worker.poll() is None, processes.output(worker)  # still up
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    _assert_written(bad)


def test_a_tick__returns_and_writes_every_other_result(processes):
    bad = _seed_bad_among_good()
    tick = processes.start("prescient_tick", "--batch-size", "100")
    assert processes.finish(tick, 60) == 0, processes.output(tick)
    _assert_written(bad)


def test_a_task_returning_a_nul__fails_it_and_the_worker_goes_on(processes):
    pytest.importorskip("django.tasks")
    from tests.tasksapp import tasks

    bad = tasks.returns_unstorable.enqueue("nul")
    good = [tasks.add.enqueue(i, 1) for i in range(20)]
    worker = processes.start("prescient_worker", "--concurrency", "2")
    wait_until(lambda: JobHistory.objects.count() == 21, 60, what="every task to end")
    assert worker.poll() is None, processes.output(worker)
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    bad.refresh()
    assert bad.status.name == "FAILED" and "cannot store" in bad.errors[-1].traceback
    for i, result in enumerate(good):
        result.refresh()
        assert result.return_value == i + 1
