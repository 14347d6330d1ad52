from datetime import timedelta

import prescient
from prescient.models import FutureJob, JobHistory


def test_schedule_and_tick(db, make_thing, t0):
    thing = make_thing()
    job = prescient.schedule(thing, "test.record", delay=timedelta(minutes=5), now=t0)
    assert job.next_check_at == t0 + timedelta(minutes=15)
    summary = prescient.tick(t0 + timedelta(minutes=15))
    assert summary.counts["completed"] == 1
    assert not FutureJob.objects.exists()
    assert JobHistory.objects.get().outcome == "completed"
