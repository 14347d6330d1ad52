"""``prescient_prune`` beside workers whose upkeep prunes the history every second: the command
and the duty share one lock, so the command exits 0 with no expired row left (#28 item 2).
Before, the command stopped an outcome at its first short batch when a worker had deleted some
of the same rows, leaving expired rows behind, and two DELETEs could deadlock."""

from __future__ import annotations

import re
import signal
from datetime import timedelta

import pytest

from prescient.clock import db_now
from prescient.models import JobHistory

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RETENTION = {"HISTORY_RETENTION_DAYS": {"*": 1}}
#: Expired rows per round: the workers delete 10,000 a pass (10 batches of 1,000), once a second.
ROWS = 30_000


def expired_history(count: int) -> None:
    """``count`` rows expired a month ago or earlier (of three outcomes), and 10 that are kept."""
    now = db_now()
    outcomes = ("completed", "failed", "killed")
    rows = [
        JobHistory(
            job_id=i, entity_name="testapp.thing", entity_key=str(i), job_exec="fault.slow",
            outcome=outcomes[i % 3], first_check_at=now, created_at=now,
            finished_at=now - timedelta(days=30, seconds=i),
        )
        for i in range(count)
    ]
    rows += [
        JobHistory(
            job_id=-i, entity_name="testapp.thing", entity_key="kept", job_exec="fault.slow", outcome="completed",
            first_check_at=now, created_at=now, finished_at=now,
        )
        for i in range(1, 11)
    ]
    JobHistory.objects.bulk_create(rows, batch_size=5000)  # one transaction: the workers see all or none


def expired_left() -> int:
    return JobHistory.objects.filter(finished_at__lt=db_now() - timedelta(days=1)).count()


def test_prune_beside_two_workers_pruning_every_second__exits_0_with_no_expired_row_three_times(processes):
    eager = {"PRESCIENT_TEST_PRUNE_EVERY": "1"}
    workers = [processes.start("prescient_worker", settings=RETENTION, env_extra=eager) for _ in range(2)]
    removed_by_command = 0
    for _ in range(3):
        expired_history(ROWS)
        # Small batches: the command's run spans several of the workers' passes.
        prune = processes.start("prescient_prune", "--batch-size", "100", settings=RETENTION)
        status = processes.finish(prune, 120)
        output = processes.output(prune)
        assert status == 0, output
        assert "deadlock" not in output
        assert expired_left() == 0, output
        assert JobHistory.objects.filter(entity_key="kept").count() == 10
        removed_by_command += int(re.search(r"removed (\d+) history row", output).group(1))  # type: ignore[union-attr]
        JobHistory.objects.all().delete()
    assert removed_by_command < 3 * ROWS, "the workers pruned beside the command"
    for worker in workers:
        assert worker.poll() is None, processes.output(worker)
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        assert processes.finish(worker, 30) == 0, processes.output(worker)
