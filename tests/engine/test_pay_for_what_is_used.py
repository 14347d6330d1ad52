"""Issue #25, item 2: a job pays only for what it uses. Settling a batch of jobs that no job
waits on (``has_dependants`` unset) sends no statement about links, workflows or waiters, on
the tick's path and on a worker child's (claim, run, settle); a job given a child while its own
run is in flight still moves that child on when it ends."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import prescient
from prescient.engine import store, sweep
from prescient.engine.decisions import Decision, TickSummary
from prescient.models import FutureJob, JobHistory, JobLink, Workflow
from prescient.states import Event, Outcome, State

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)

#: What a batch without dependants must not name: the links, the workflows, and (through the
#: links) the lookup of waiting children.
UNUSED = (JobLink._meta.db_table, Workflow._meta.db_table)


def unused_statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if any(table in q["sql"] for table in UNUSED)]


@pytest.fixture
def mixed_batch(make_thing, register, t0):
    """Due jobs that end completed, are re-checked, are retried and end failed; one of them in a
    workflow, none with dependants."""
    def fail(thing, job):
        raise RuntimeError("no")

    register("test.fail_once", fail, max_retries=1)
    register("test.fail_now", fail, max_retries=0)
    jobs = [
        prescient.schedule(make_thing(), "test.record", at=t0, now=t0),
        prescient.schedule(make_thing(), "test.record", at=t0, now=t0, workflow="billing"),
        prescient.schedule(make_thing(status="again"), "test.record", at=t0, now=t0),
        prescient.schedule(make_thing(), "test.fail_once", at=t0, now=t0),
        prescient.schedule(make_thing(), "test.fail_now", at=t0, now=t0),
    ]
    assert not any(job.has_dependants for job in FutureJob.objects.all())
    return jobs


def test_a_tick_over_jobs_without_dependants__names_no_link_workflow_or_waiter(mixed_batch, t0):
    with CaptureQueriesContext(connection) as queries:
        summary = prescient.tick(t0 + HOUR)

    assert summary.processed == 5
    assert JobHistory.objects.filter(outcome=Outcome.COMPLETED).count() == 2
    assert JobHistory.objects.filter(outcome=Outcome.FAILED).count() == 1
    assert FutureJob.objects.count() == 2  # re-checked, and retried
    assert unused_statements(queries) == []


def test_a_worker_childs_parcel_without_dependants__names_no_link_workflow_or_waiter(mixed_batch, t0):
    token = "worker:test/1"
    now = t0 + HOUR
    with CaptureQueriesContext(connection) as queries:
        jobs = store.claim(now, 10, token, start=True)  # as a child claims: its runs start with the claim
        decisions = list(sweep.run_group(jobs, token, now, started=True))
        store.settle(decisions, token, now, TickSummary())

    assert len(decisions) == 5
    assert FutureJob.objects.filter(state=State.RUNNING).count() == 0
    assert unused_statements(queries) == []


def test_after__marks_the_live_parents_and_not_the_ended_ones(make_thing, t0):
    ended = prescient.schedule(make_thing(), "test.record", at=t0, now=t0)
    prescient.tick(t0 + HOUR)
    live = prescient.schedule(make_thing(), "test.record", at=t0 + 2 * HOUR, now=t0)
    alone = prescient.schedule(make_thing(), "test.record", at=t0 + 2 * HOUR, now=t0)

    child = prescient.schedule(make_thing(), "test.record", after=[ended.pk, live], now=t0 + HOUR)

    assert FutureJob.objects.get(pk=live.pk).has_dependants
    assert not FutureJob.objects.get(pk=alone.pk).has_dependants
    assert not FutureJob.objects.get(pk=child.pk).has_dependants


def test_a_parent_ending_in_a_tick__moves_its_child_on(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", at=t0, now=t0)
    child = prescient.schedule(make_thing(), "test.record", after=[parent], now=t0)

    prescient.tick(t0 + HOUR)

    assert JobHistory.objects.get(job_id=parent.pk).outcome == Outcome.COMPLETED
    assert JobHistory.objects.get(job_id=child.pk).outcome == Outcome.COMPLETED  # unblocked, due: run too


@pytest.mark.parametrize("kind", ["tick", "worker"])
def test_a_parent_given_a_child_during_its_run__moves_it_on_when_it_ends(make_thing, t0, kind):
    """The claimed row says no dependants; the stored one has one by the time the run settles."""
    parent = prescient.schedule(make_thing(), "test.record", at=t0, now=t0)
    other = prescient.schedule(make_thing(), "test.record", at=t0, now=t0)
    token = f"{kind}:test/1"
    claimed = store.claim(t0 + HOUR, 10, token, start=True)
    assert not any(job.has_dependants for job in claimed)

    child = prescient.schedule(make_thing(), "test.record", after=[parent], now=t0 + HOUR)
    assert FutureJob.objects.get(pk=child.pk).state == State.WAITING
    summary = TickSummary()
    decisions = [Decision(job=job, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True) for job in claimed]
    store.settle(decisions, token, t0 + HOUR, summary)

    assert set(JobHistory.objects.values_list("job_id", flat=True)) == {parent.pk, other.pk}
    assert summary.counts[Outcome.COMPLETED] == 2
    assert FutureJob.objects.get(pk=child.pk).state == State.SCHEDULED
