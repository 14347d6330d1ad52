"""Queues for checks (issue #33, item 4): ``@prescient.check(..., queue="mail")`` puts its jobs
in a queue of their own, served by ``prescient_worker --queue mail`` as django.tasks queues are."""

from __future__ import annotations

import pytest

import prescient
from prescient.engine import store
from prescient.models import FutureJob

pytestmark = pytest.mark.django_db


@pytest.fixture
def mail(register):
    register("test.mail", lambda thing, job: None, queue="mail")
    register("test.plain", lambda thing, job: None)


def test_a_check_with_a_queue__schedules_its_jobs_in_it_by_every_verb(mail, make_thing, t0):
    one = prescient.schedule(make_thing(), "test.mail", now=t0)
    from tests.testapp.models import Thing

    made = prescient.schedule_many(Thing.objects.filter(pk=make_thing().pk), "test.mail", now=t0)
    plain = prescient.schedule(make_thing(), "test.plain", now=t0)
    assert made == 1
    assert set(FutureJob.objects.filter(job_exec="test.mail").values_list("queue", flat=True)) == {"mail"}
    assert (one.queue, plain.queue) == ("mail", "")


def test_a_claim_for_a_queue__takes_only_its_jobs(mail, make_thing, t0):
    for _ in range(3):
        prescient.schedule(make_thing(), "test.mail", now=t0)
        prescient.schedule(make_thing(), "test.plain", now=t0)
    mails = store.claim(t0, 10, "tick:mail", ["mail"], start=True)
    checks = store.claim(t0, 10, "tick:checks", [""], start=True)
    assert {job.job_exec for job in mails} == {"test.mail"} and len(mails) == 3
    assert {job.job_exec for job in checks} == {"test.plain"} and len(checks) == 3


@pytest.mark.parametrize("queue", [" mail", "a,b", "x" * 101, 5])
def test_a_bad_queue_name__is_refused_at_registration(register, queue):
    with pytest.raises(ValueError, match="queue must be"):
        register("test.badqueue", lambda thing, job: None, queue=queue)


@pytest.mark.parametrize("lanes", [0, -1, 1.5, True])
def test_a_bad_lanes__is_refused_at_registration(register, lanes):
    with pytest.raises(ValueError, match="lanes must be"):
        register("test.badlanes", lambda thing, job: None, lanes=lanes)
