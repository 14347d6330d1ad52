"""The seed's scenario with a real worker on PostgreSQL: a parent running when its workflow is
paused completes; its child becomes paused (remembering scheduled) and does not start; release
runs the child once, after the parent ended (by the checks' own monotonic stamps)."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.testapp.models import RunLog, Thing

from .conftest import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_pause_while_the_parent_runs__child_waits_paused_and_runs_once_after_release(processes):
    charge_thing, pack_thing = Thing.objects.create(name="1.5"), Thing.objects.create(name="0.05")
    due = timezone.now() - timedelta(hours=1)  # due now (a time of its own would round up to a slot)
    charge = prescient.schedule(charge_thing, "fault.slow", workflow="order-42", at=due)
    pack = prescient.schedule(pack_thing, "fault.slow", workflow="order-42", after=[charge], at=due)
    assert pack.state == State.WAITING
    worker = processes.start("prescient_worker", "--concurrency", "1")

    wait_until(lambda: RunLog.objects.filter(entity_key=str(charge_thing.pk)).exists(), 30, "charge to start")
    assert prescient.pause(workflow="order-42") == 1  # charge, mid-run; pack stays waiting
    assert FutureJob.objects.get(pk=pack.pk).state == State.WAITING
    wait_until(lambda: JobHistory.objects.filter(job_id=charge.pk).exists(), 30, "charge to complete")

    row = FutureJob.objects.get(pk=pack.pk)
    assert (row.state, row.last_state) == (State.PAUSED, State.SCHEDULED)
    time.sleep(1.0)  # several polls of the worker: a paused child must not start
    assert not RunLog.objects.filter(entity_key=str(pack_thing.pk)).exists()

    assert prescient.release(workflow="order-42") == 1
    wait_until(lambda: JobHistory.objects.filter(job_id=pack.pk).exists(), 30, "pack to complete")
    worker.send_signal(signal.SIGTERM)
    assert processes.finish(worker, 30) == 0

    assert JobHistory.objects.get(job_id=charge.pk).outcome == Outcome.COMPLETED
    assert JobHistory.objects.get(job_id=pack.pk).outcome == Outcome.COMPLETED
    [charge_run] = RunLog.objects.filter(entity_key=str(charge_thing.pk))
    [pack_run] = RunLog.objects.filter(entity_key=str(pack_thing.pk))
    assert charge_run.ended is not None and pack_run.started >= charge_run.ended
