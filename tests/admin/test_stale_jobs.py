"""Issue 3, done-when: a job whose reservation went stale is buried by a tick, and a person can
run it again from the admin action; the next tick then runs it exactly once."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import State
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db


def test_stale_reservation__buried_by_a_tick_then_run_again_from_the_admin(admin_client, make_job, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "STALE_AFTER_SECONDS": 60}
    now = timezone.now()
    job = make_job("test.record", state=State.RUNNING, next_check_at=now - timedelta(minutes=30),
                   reserved_by="tick:4242:gone", reserved_at=now - timedelta(minutes=5))

    summary = prescient.tick(now)
    job.refresh_from_db()
    assert summary.counts["buried"] == 1
    assert (job.state, job.reserved_by) == (State.BURIED, "")
    assert job.last_error.startswith("worker lost")
    assert not RunLog.objects.exists(), "a buried job is not run by the tick"

    response = admin_client.post(
        reverse("admin:prescient_futurejob_changelist"),
        {"action": "run_jobs_now", "_selected_action": [job.pk]},
        follow=True,
    )
    assert response.status_code == 200
    job.refresh_from_db()
    assert job.state == State.SCHEDULED

    prescient.tick(timezone.now())
    assert RunLog.objects.count() == 1
    assert JobHistory.objects.get().outcome == "completed"
    assert not FutureJob.objects.exists()
