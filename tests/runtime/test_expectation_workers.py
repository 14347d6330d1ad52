"""Two workers at once on PostgreSQL over 100 expectations: each rung's handler is called once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

import prescient
from prescient import expectations
from prescient.models import FutureJob, JobHistory
from tests.conftest import manage
from tests.testapp import rungs
from tests.testapp.models import RunLog, Thing


@pytest.fixture
def shipped(monkeypatch):
    """``test.shipped`` declared here and in the workers (tests/testapp/prescient_checks.py)."""
    monkeypatch.setenv("PRESCIENT_TEST_EXPECTATION", "1")
    expectations.unregister(rungs.NAME)
    rungs.declare()
    yield
    expectations.unregister(rungs.NAME)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once__never_call_one_rung_twice(shipped):
    now = timezone.now()
    things = [Thing.objects.create() for _ in range(100)]
    for thing in things:
        # Started four hours ago: every rung has passed; one rung is climbed per pass.
        prescient.expect(thing, rungs.NAME, start=now - timedelta(hours=4), now=now - timedelta(hours=4))
    for _rung in rungs.LADDER:
        FutureJob.objects.update(next_check_at=timezone.now() - timedelta(minutes=1))  # due for both workers
        workers = [manage("prescient_worker", "--once", "--concurrency", "2") for _ in range(2)]
        for worker in workers:
            _, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
    calls = Counter(RunLog.objects.filter(check_name=rungs.NAME).values_list("entity_key", flat=True))
    assert set(calls.values()) == {1}
    assert set(calls) == {f"{thing.pk}:{step}" for thing in things for step in (1, 2, 3)}
    assert not FutureJob.objects.exists()
    assert JobHistory.objects.filter(outcome="missed").count() == 100
    assert len(set(RunLog.objects.values_list("pid", flat=True))) >= 2
