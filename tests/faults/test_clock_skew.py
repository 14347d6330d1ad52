"""Host clocks 10 minutes off: leases, heartbeats and due times follow the database's clock.

A worker whose host clock is 10 minutes ahead of (or behind) the database runs beside a healthy
one, over checks that take three heartbeats each. Neither takes the other's live claims, no run
is charged a false failure, and a job due in 6 minutes is not run early. The wall clock of the
skewed worker (and its children) is shifted below prescient (tests/faults/skewed_clock/).
"""

from __future__ import annotations

import json
import signal
from datetime import timedelta

import pytest
from django.core.management import call_command

from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from tests.testapp.models import RunLog

from .conftest import overlapping, seed, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOBS = 16
RUN_SECONDS = "1.5"  # three heartbeats of FAST


@pytest.mark.parametrize("offset", [600, -600], ids=["ahead", "behind"])
def test_a_worker_with_a_skewed_host_clock__neither_steals_nor_loses_claims(processes, offset, capsys):
    seed(JOBS, "fault.slow", name=RUN_SECONDS)
    [later] = seed(1, "fault.slow", name=RUN_SECONDS, due_in=timedelta(minutes=6))
    healthy = processes.start("prescient_worker", "--concurrency", "2")
    skewed = processes.start("prescient_worker", "--concurrency", "2", clock_offset=offset)
    wait_until(lambda: JobHistory.objects.count() == JOBS, 60, what="every due job to finish")

    # While both still run: status shows the skew, and warns.
    call_command("prescient_status", "--json")
    status = json.loads(capsys.readouterr().out)
    skews = sorted((w["clock_skew_seconds"] for w in status["workers"]), key=abs)
    assert len(skews) == 2 and abs(skews[0]) < 1 and abs(skews[1] - offset) < 5
    call_command("prescient_status")
    assert "off the database's" in capsys.readouterr().err

    for proc in (healthy, skewed):
        proc.send_signal(signal.SIGTERM)
    for proc in (healthy, skewed):
        assert processes.finish(proc, 30) == 0, processes.output(proc)

    assert overlapping("fault.slow") == []  # 0 runs at the same time
    rows = JobHistory.objects.all()
    assert {row.outcome for row in rows} == {Outcome.COMPLETED}
    assert [row.failure_count for row in rows] == [0] * JOBS  # 0 false failures
    assert all(row.run_count == 1 for row in rows)
    assert "worker lost" not in "".join(row.last_error for row in rows)
    # 0 early runs: the job due in 6 minutes is still waiting.
    assert FutureJob.objects.filter(entity_key=str(later.pk)).exists()
    assert not RunLog.objects.filter(entity_key=str(later.pk)).exists()
    assert RunLog.objects.filter(check_name="fault.slow").count() == JOBS
    pids = set(RunLog.objects.values_list("pid", flat=True))
    assert len(pids) >= 2, "both workers took part"
