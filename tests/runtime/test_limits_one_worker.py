"""A worker honours limits and rates on SQLite too, with one process (issue #33): eight lanes,
never more than the limit at once. (Two workers on PostgreSQL: tests/faults/test_limits.py.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

import prescient
from prescient import checks
from prescient.models import JobHistory
from tests.conftest import ROOT, database_env
from tests.faults.conftest import most_at_once, wait_until
from tests.faults.conftest import run_intervals as intervals
from tests.testapp.models import Thing

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_one_worker_of_8_lanes__keeps_a_limit_of_3(tmp_path):
    import importlib

    from tests.limitsapp import prescient_checks

    importlib.reload(prescient_checks)
    try:
        things = Thing.objects.bulk_create([Thing(name=f"{tmp_path}|0.1") for _ in range(30)])
        prescient.schedule_many(Thing.objects.filter(pk__in=[t.pk for t in things]), "limit.three",
                                now=timezone.now() - timedelta(hours=1))
        env = {**database_env(), "PRESCIENT_TEST_LIMITS": "1",
               "PRESCIENT_TEST_SETTINGS": json.dumps({"WORKER_POLL_SECONDS": 0.2})}
        with open(tmp_path / "out", "wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "django", "prescient_worker", "--settings=tests.settings",
                 "--concurrency", "1", "--lanes", "8"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )
        try:
            wait_until(lambda: JobHistory.objects.count() == 30, 60, what="every job to end")
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
        runs = intervals(tmp_path)
        assert len(runs) == 30
        assert most_at_once(runs) == 3, (most_at_once(runs), (tmp_path / "out").read_text()[-2000:])
    finally:
        for name in ("limit.three", "limit.per_status", "rate.five"):
            checks.unregister(name)
