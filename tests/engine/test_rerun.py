"""Running a finished job again (issue #35 item 1): ``prescient.rerun`` makes a new live job of
the same check and entity, linked both ways to the history row it came from, or refuses why."""

from datetime import timedelta

import pytest

import prescient
from prescient.exceptions import HistoryNotFound, RerunRefused
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed_row(register, make_thing, t0):
    """A check job that failed (its one run raised), in workflow "w", priority 3, with a payload."""
    outcome = {"fail": True}

    def flaky(thing, job):
        if outcome["fail"]:
            raise RuntimeError("boom")

    register("test.flaky", flaky, max_retries=0)
    thing = make_thing()
    job = prescient.schedule(thing, "test.flaky", at=t0, workflow="w", now=t0)
    FutureJob.objects.filter(pk=job.pk).update(priority=3, payload={"note": "kept"})
    prescient.tick(t0 + timedelta(minutes=1))
    row = JobHistory.objects.get(job_id=job.pk)
    assert row.outcome == Outcome.FAILED
    outcome["fail"] = False
    return row


def test_rerun__a_failed_job_is_a_new_live_job_due_now_linked_to_its_row(failed_row, t0):
    now = t0 + timedelta(hours=2, minutes=7)
    job = prescient.rerun(failed_row.pk, now=now)
    stored = FutureJob.objects.get()
    assert stored.pk == job.pk != failed_row.job_id
    assert (stored.entity_name, stored.entity_key, stored.job_exec, stored.kind) == (
        failed_row.entity_name, failed_row.entity_key, failed_row.job_exec, "check",
    )
    assert (stored.workflow, stored.priority, stored.payload) == ("w", 3, {"note": "kept"})
    assert (stored.state, stored.next_check_at, stored.created_at) == (State.SCHEDULED, now, now)
    assert (stored.check_count, stored.run_count, stored.failure_count, stored.last_error) == (0, 0, 0, "")
    assert stored.rerun_of == failed_row.pk


def test_rerun__its_own_history_row_names_the_row_it_came_from(failed_row, t0):
    now = t0 + timedelta(hours=1)
    job = prescient.rerun(failed_row, now=now)
    prescient.tick(now + timedelta(minutes=1))
    new_row = JobHistory.objects.get(job_id=job.pk)
    assert (new_row.outcome, new_row.rerun_of) == (Outcome.COMPLETED, failed_row.pk)
    assert list(JobHistory.objects.filter(rerun_of=failed_row.pk)) == [new_row]
    assert JobHistory.objects.get(pk=failed_row.pk).rerun_of is None  # the old row is not rewritten


def test_rerun__refused_while_a_live_job_of_that_check_and_entity_exists(failed_row, t0):
    live = prescient.rerun(failed_row, now=t0)
    with pytest.raises(RerunRefused, match=rf"job {live.pk} of this check for this entity is live") as caught:
        prescient.rerun(failed_row, now=t0)
    assert caught.value.row_id == failed_row.pk
    assert FutureJob.objects.count() == 1


def test_rerun__refused_when_the_check_is_no_longer_registered(failed_row, t0):
    from prescient import checks

    checks.unregister("test.flaky")
    with pytest.raises(RerunRefused, match="cannot be run again: Unknown check 'test.flaky'"):
        prescient.rerun(failed_row, now=t0)
    assert not FutureJob.objects.exists()


def test_rerun__of_an_unknown_row_raises_history_not_found(t0):
    with pytest.raises(HistoryNotFound, match="No finished job"):
        prescient.rerun(987654, now=t0)


def test_rerun__into_a_paused_workflow_starts_paused(failed_row, t0):
    prescient.pause(workflow="w", now=t0)
    job = prescient.rerun(failed_row, now=t0)
    assert (job.state, job.last_state) == (State.PAUSED, State.SCHEDULED)


def test_rerun__of_a_killed_job_too(register, make_thing, t0):
    register("test.record2", lambda thing, job: None)
    job = prescient.schedule(make_thing(), "test.record2", at=t0 + timedelta(hours=1), now=t0)
    prescient.kill(job, "by mistake", now=t0)
    row = JobHistory.objects.get()
    again = prescient.rerun(row, now=t0)
    assert (again.job_exec, again.rerun_of, again.state) == ("test.record2", row.pk, State.SCHEDULED)


def test_rerun__of_an_expectation_is_refused_saying_to_expect_it_again(declare, make_thing, t0):
    declare("test.expect")
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=t0)
    prescient.cancel(thing, "test.expect", now=t0)
    row = JobHistory.objects.get(job_id=job.pk)
    with pytest.raises(RerunRefused, match=r"expectation's ladder .* prescient.expect\(instance, 'test.expect'\)"):
        prescient.rerun(row, now=t0)
    assert not FutureJob.objects.exists()
