"""The same scenarios over every registered kind of job: what the engine promises for any kind.

Each kind has a maker below that creates one of its jobs behaving as asked ("ok", "recheck",
"fail", "hang"). A kind registered without a maker fails ``test_every_kind_has_a_maker``, so a
new kind cannot skip the contract.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import prescient
from prescient.engine import store, sweep
from prescient.engine.decisions import TickSummary
from prescient.engine.kind import registered_kinds
from prescient.maintenance.rescuer import rescue
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome, State
from tests.conftest import lose_claims

pytestmark = pytest.mark.django_db

Maker = Callable[[str], FutureJob]


@pytest.fixture
def check_maker(register, make_thing) -> Maker:
    behaviours: dict[str, Callable[[Any, Any], Any]] = {
        "ok": lambda thing, job: None,
        "recheck": lambda thing, job: timedelta(hours=1),
        "fail": lambda thing, job: (_ for _ in ()).throw(RuntimeError("contract failure")),
        "hang": lambda thing, job: __import__("time").sleep(5),
    }

    def make(behaviour: str) -> FutureJob:
        name = f"contract.{behaviour}"
        register(name, behaviours[behaviour], timeout_seconds=1)
        return prescient.schedule(make_thing(), name, now=timezone.now())

    return make


@pytest.fixture
def task_maker() -> Maker:
    pytest.importorskip("django.tasks")
    from tests.tasksapp import tasks

    enqueue = {
        "ok": lambda: tasks.add.enqueue(2, 3),
        "recheck": None,  # a task runs once per enqueue: it has no re-checks
        "fail": lambda: tasks.boom.enqueue("contract failure"),
        "hang": lambda: tasks.sleeps.enqueue(5),  # timeout 1 s
    }

    def make(behaviour: str) -> FutureJob:
        how = enqueue[behaviour]
        if how is None:
            pytest.skip(f"the task kind has no {behaviour!r}")
        return FutureJob.objects.get(pk=int(how().id))

    return make


@pytest.fixture
def expectation_maker(declare, make_thing) -> Maker:
    """An expectation whose handler behaves as asked: "ok" climbs its one rung (and ends
    ``missed``, the end of a ladder climbed without error), "recheck" has a second rung."""

    def ok(thing: Any, job: Any, step: int) -> None:
        return None

    def fail(thing: Any, job: Any, step: int) -> None:
        raise RuntimeError("contract failure")

    def hang(thing: Any, job: Any, step: int) -> None:
        __import__("time").sleep(5)

    handlers = {"ok": ok, "recheck": ok, "fail": fail, "hang": hang}

    def make(behaviour: str) -> FutureJob:
        name = f"contract.{behaviour}"
        ladder = [timedelta(hours=1), timedelta(hours=2)] if behaviour == "recheck" else [timedelta(hours=1)]
        declare(name, handler=handlers[behaviour], ladder=ladder, timeout_seconds=1)
        job = prescient.expect(make_thing(), name, now=timezone.now())
        assert job is not None
        return job

    return make


MAKERS = {"check": "check_maker", "expectation": "expectation_maker", "task": "task_maker"}
#: How a job that did what it was asked ends, by kind (an expectation's ladder ends ``missed``).
DONE = {"expectation": Outcome.MISSED}


def done(job: FutureJob) -> str:
    return DONE.get(job.kind, Outcome.COMPLETED)


def test_every_kind_has_a_maker():
    assert {kind.name for kind in registered_kinds()} <= set(MAKERS)


@pytest.fixture(params=sorted(MAKERS))
def make(request) -> Maker:
    if request.param not in {kind.name for kind in registered_kinds()}:
        pytest.skip(f"kind {request.param!r} is not registered here")
    return request.getfixturevalue(MAKERS[request.param])


def due(job: FutureJob):
    return job.next_check_at + timedelta(seconds=1)


def history(job: FutureJob) -> JobHistory:
    return JobHistory.objects.get(job_id=job.pk)


def test_success__ends_completed_with_one_history_row(make):
    job = make("ok")
    summary = prescient.tick(due(job))
    assert summary.counts[done(job)] == 1
    row = history(job)
    assert (row.outcome, row.run_count, row.kind) == (done(job), 1, job.kind)
    assert not FutureJob.objects.filter(pk=job.pk).exists()


def test_recheck__stays_pending_with_one_check_counted(make):
    job = make("recheck")
    ran_at = due(job)
    prescient.tick(ran_at)
    job.refresh_from_db()
    assert (job.state, job.check_count, job.run_count) == (State.SCHEDULED, 1, 1)
    assert job.next_check_at > ran_at


def test_failure__is_recorded_and_retried(make):
    job = make("fail")
    summary = prescient.tick(due(job))
    assert summary.counts["retried"] == 1
    job.refresh_from_db()
    assert (job.state, job.failure_count, job.run_count) == (State.SCHEDULED, 1, 1)
    assert "contract failure" in job.last_error and job.recent_errors[-1]["error"] == job.last_error


def test_failure__past_the_retries_ends_failed(make, settings):
    settings.PRESCIENT = {"MAX_RETRIES": 0}
    job = make("fail")
    for _ in range(5):  # tasks have their backend's retries: run until it ends
        if not FutureJob.objects.filter(pk=job.pk).exists():
            break
        prescient.tick(due(FutureJob.objects.get(pk=job.pk)))
    row = history(job)
    assert row.outcome == Outcome.FAILED and "contract failure" in row.last_error


@pytest.mark.slow
def test_timeout__stops_the_run_and_counts_a_failure(make):
    job = make("hang")
    prescient.tick(due(job))
    live = FutureJob.objects.filter(pk=job.pk).first()
    row = live or history(job)
    error = row.last_error
    assert error.startswith("CheckTimeout") and row.failure_count == 1


def test_lost_run__is_reclaimed_and_then_runs_once(make):
    job = make("ok")
    now = due(job)
    token = sweep.WORKER_TOKEN_PREFIX + "lost:1/1"
    [claimed] = store.claim(now, 10, token)
    assert claimed.pk == job.pk
    assert store.start_runs([claimed], token) == {claimed.pk}  # its run began; then its worker died
    lose_claims(job.pk)
    assert rescue(now + timedelta(hours=1)) == {"reclaimed": 1}
    job.refresh_from_db()
    assert (job.state, job.failure_count, job.reserved_by) == (State.SCHEDULED, 1, "")
    assert "worker lost" in job.last_error
    prescient.tick(now + timedelta(hours=1))
    assert history(job).outcome == done(job) and history(job).run_count == 1


def test_kill_during_the_run__ends_killed_when_the_run_returns(make):
    job = make("ok")
    now = due(job)
    token = sweep.new_token()
    [claimed] = store.claim(now, 10, token)
    assert store.start_runs([claimed], token) == {claimed.pk}  # the run began before the kill
    assert prescient.kill(job, "contract kill", now=now) == "requested"
    summary = TickSummary()
    store.settle([sweep.run_one(claimed, sweep.prepare([claimed]).get(claimed.pk), now)], token, now, summary)
    row = history(job)
    assert (row.outcome, row.reason, summary.counts[Outcome.KILLED]) == (Outcome.KILLED, "contract kill", 1)


def test_pause_and_release__nothing_runs_while_paused_then_it_runs_once(make):
    job = make("ok")
    now = due(job)
    assert prescient.pause(job=job, now=now) == 1
    assert prescient.tick(now).processed == 0
    job.refresh_from_db()
    assert (job.state, job.last_state) == (State.PAUSED, State.SCHEDULED)
    assert prescient.release(job=job, now=now) == 1
    assert prescient.tick(now).processed == 1
    assert history(job).outcome == done(job)
