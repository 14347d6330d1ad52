"""Run now on an expectation judges met now and does not climb (issue #34, item 4): before, the
admin's Run now button called the handler with step 1 hours before rung 1 (the escalation fired
early). A run before its rung's time asks met; met, the job ends ``met`` (with ``met_at``); not
met, nothing is called and the job waits for its rung, which then climbs as it always did. And a
save that meets while a rung is in flight keeps its met_at on the history row."""

from __future__ import annotations

from datetime import timedelta

import pytest

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from tests.conftest import T0
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db
#: A save's expectations are judged when its transaction commits: these tests commit for real.
COMMITS = pytest.mark.django_db(transaction=True)

H = timedelta(hours=1)


def test_run_now_before_rung_1__not_met__calls_nothing_and_waits_for_the_rung(declare, make_thing):
    calls = declare()
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    prescient.run_now(job, now=T0 + H)
    assert prescient.tick(T0 + H).processed == 1
    assert calls == []  # rung 1 is at T0 + 3h: not yet
    waiting = FutureJob.objects.get(pk=job.pk)
    assert waiting.next_check_at == T0 + 3 * H and waiting.payload["step"] == 0
    assert prescient.tick(T0 + 3 * H).processed == 1
    assert calls == [(thing.pk, 1)]  # the rung itself climbs, once
    assert FutureJob.objects.get(pk=job.pk).payload["step"] == 1


def test_run_now_before_rung_2__climbs_nothing_either(declare, make_thing):
    calls = declare()
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    prescient.tick(T0 + 3 * H)
    prescient.run_now(job.pk, now=T0 + 4 * H)
    prescient.tick(T0 + 4 * H)
    assert calls == [(thing.pk, 1)]
    assert FutureJob.objects.get(pk=job.pk).next_check_at == T0 + 6 * H


def test_run_now_before_its_rung__met_by_a_write_no_save_saw__ends_it_met(declare, make_thing):
    calls = declare()
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    Thing.objects.filter(pk=thing.pk).update(status="shipped")  # no save signal: the job stays
    prescient.run_now(job, now=T0 + H)
    prescient.tick(T0 + H)
    assert calls == []
    row = JobHistory.objects.get(entity_key=str(thing.pk), job_exec="test.expect")
    assert row.outcome == Outcome.MET and row.payload["met_at"] == (T0 + H).isoformat()


def test_run_now_before_its_rung__a_callable_met_is_asked(declare, make_thing):
    calls = declare("test.callable", met=lambda thing: Thing.objects.get(pk=thing.pk).status == "shipped")
    thing = make_thing()
    job = prescient.expect(thing, "test.callable", now=T0)
    assert job is not None
    prescient.run_now(job, now=T0 + H)
    prescient.tick(T0 + H)
    assert calls == [] and FutureJob.objects.filter(pk=job.pk).exists()
    Thing.objects.filter(pk=thing.pk).update(status="shipped")
    prescient.run_now(job, now=T0 + 2 * H)
    prescient.tick(T0 + 2 * H)
    assert calls == [] and not FutureJob.objects.filter(pk=job.pk).exists()
    assert JobHistory.objects.get(entity_key=str(thing.pk), job_exec="test.callable").outcome == Outcome.MET


@COMMITS
def test_a_save_that_meets_while_a_rung_runs__ends_it_met_with_met_at(declare, make_thing):
    """Issue #34, item 4: the job ended met but its history had no met_at."""

    def ship_during_the_rung(thing: Thing, job: FutureJob, step: int) -> None:
        thing.status = "shipped"
        thing.save()  # the job is in flight: its end is requested, for when the rung returns

    declare(handler=ship_during_the_rung)
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    prescient.tick(T0 + 3 * H)
    row = JobHistory.objects.get(entity_key=str(thing.pk), job_exec="test.expect")
    assert row.outcome == Outcome.MET
    assert row.payload.get("met_at"), row.payload
