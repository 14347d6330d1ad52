"""Rule 7: concurrent ticks never run a job twice (real processes, counted outside the job table)."""

from datetime import timedelta

import pytest
from django.db.models import Count

from prescient.models import FutureJob, JobHistory
from tests.conftest import T0, manage
from tests.testapp.models import RunLog, Thing

pytestmark = [pytest.mark.slow]


def seed(count: int) -> None:
    things = Thing.objects.bulk_create([Thing(name=f"t{i}") for i in range(count)])
    FutureJob.objects.bulk_create(
        [
            FutureJob(
                entity_name="testapp.thing", entity_key=str(t.pk), job_exec="test.record",
                first_check_at=T0, next_check_at=T0 - timedelta(minutes=15 * (i % 4)),
                created_at=T0 - timedelta(hours=1),
            )
            for i, t in enumerate(things)
        ]
    )


def run_ticks(processes: int, timeout: float = 120) -> list[str]:
    procs = [manage("prescient_tick", "--now", T0.isoformat(), "--batch-size", "50") for _ in range(processes)]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert [p.returncode for p in procs] == [0] * processes, [r[2] for r in results]
    return [out for _, out, _ in results]


def assert_each_ran_once(count: int) -> None:
    assert RunLog.objects.count() == count
    duplicates = RunLog.objects.values("entity_key").annotate(n=Count("id")).filter(n__gt=1)
    assert list(duplicates) == []
    assert JobHistory.objects.count() == count
    assert set(JobHistory.objects.values_list("outcome", flat=True)) == {"completed"}
    assert not FutureJob.objects.exists()


@pytest.mark.postgres
def test_two_ticks_on_postgres__run_2000_jobs_exactly_once(transactional_db):
    seed(2000)
    outputs = run_ticks(2)
    assert_each_ran_once(2000)
    processed = [int(out.split("processed=")[1].split()[0]) for out in outputs]
    assert sum(processed) == 2000, outputs


def test_two_ticks_on_sqlite_or_postgres__never_run_a_job_twice(transactional_db):
    seed(300)
    run_ticks(2)
    assert_each_ran_once(300)
