"""Limits and rates per key under real workers (issue #33, item 2): two workers of 32 lanes each
never run more than the limit at once, and start no more than the rate allows, the database
holding both; a job held back is never charged. The workers install tests/limitsapp
(``PRESCIENT_TEST_LIMITS=1``); this process declares the same limits to seed the jobs."""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

import prescient
from prescient import checks
from prescient.models import FutureJob, JobHistory
from tests.testapp.models import Thing

from .conftest import most_at_once, wait_until
from .conftest import run_intervals as intervals

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LIMITS = {"PRESCIENT_TEST_LIMITS": "1"}


@pytest.fixture(autouse=True)
def limited_checks():
    """The limitsapp's checks, declared in this process too (to schedule their jobs)."""
    import importlib

    from tests.limitsapp import prescient_checks

    importlib.reload(prescient_checks)
    yield
    for name in ("limit.three", "limit.per_status", "rate.five"):
        checks.unregister(name)


def seed(count: int, check: str, folder: Path, seconds: float, statuses: tuple[str, ...] = ("open",)) -> None:
    things = Thing.objects.bulk_create(
        [Thing(name=f"{folder}|{seconds}", status=statuses[i % len(statuses)]) for i in range(count)]
    )
    # Scheduled as of an hour ago: due now, whatever the slot.
    prescient.schedule_many(Thing.objects.filter(pk__in=[t.pk for t in things]), check,
                            now=timezone.now() - timedelta(hours=1))


def test_a_limit_of_3__is_never_exceeded_by_2_workers_of_32_lanes(processes, tmp_path):
    seed(120, "limit.three", tmp_path, 0.1)
    first = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "32", env_extra=LIMITS)
    second = processes.start("prescient_worker", "--concurrency", "1", "--lanes", "32", env_extra=LIMITS)
    wait_until(lambda: JobHistory.objects.count() == 120, 90, what="every job to end")
    for worker in (first, second):
        worker.send_signal(signal.SIGTERM)
        assert processes.finish(worker, 30) == 0, processes.output(worker)
    runs = intervals(tmp_path)
    assert len(runs) == 120, "each job ran once"
    assert most_at_once(runs) == 3, most_at_once(runs)  # the limit, used, never exceeded
    assert sum(JobHistory.objects.values_list("failure_count", flat=True)) == 0  # held back: never charged


def test_a_limit_per_field__runs_one_per_value_and_values_side_by_side(processes, tmp_path):
    seed(30, "limit.per_status", tmp_path, 0.1, statuses=("a", "b", "c"))
    worker = processes.start("prescient_worker", "--concurrency", "2", "--lanes", "8", env_extra=LIMITS)
    wait_until(lambda: JobHistory.objects.count() == 30, 60, what="every job to end")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0
    by_status: dict[str, list[tuple[float, float]]] = {}
    for thing in Thing.objects.all():
        for line in (tmp_path / str(thing.pk)).read_text().splitlines():
            start, end = line.split()
            by_status.setdefault(thing.status, []).append((float(start), float(end)))
    assert {status: most_at_once(runs) for status, runs in by_status.items()} == {"a": 1, "b": 1, "c": 1}
    assert most_at_once(intervals(tmp_path)) > 1


def test_a_rate_of_5_a_second__starts_no_more_than_it_allows_across_2_workers(processes, tmp_path):
    seed(60, "rate.five", tmp_path, 0.01)
    workers = [processes.start("prescient_worker", "--concurrency", "1", "--lanes", "8", env_extra=LIMITS)
               for _ in range(2)]
    wait_until(lambda: JobHistory.objects.count() >= 40, 60, what="40 runs")
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        assert processes.finish(worker, 30) == 0
    starts = sorted(start for start, _ in intervals(tmp_path))
    seconds = starts[-1] - starts[0]
    # A bucket of 5 (the burst), refilled at 5 a second: over any stretch, at most 5 + 5 per second of it.
    for i, start in enumerate(starts):
        within = [s for s in starts[i:] if s - start <= 1.0]
        assert len(within) <= 5 + 5 * 1.0 + 1, (len(within), start)
    assert len(starts) <= 5 + 5 * seconds + 1
    assert len(starts) >= 0.9 * 5 * seconds  # and it keeps to the rate when enough is due
    assert not FutureJob.objects.filter(failure_count__gt=0).exists()
