"""The signals of jobs that end (issue #34, item 8): ``job_ended`` for every kind and outcome,
``expectation_met`` for an expectation met at a save, at a rung or by ``recheck()``; sent after
the commit that ended the job, never for one rolled back, robustly; nothing registered when no
receiver listens."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import connection, transaction

import prescient
from prescient.signals import expectation_met, job_ended
from prescient.states import Outcome
from tests.conftest import T0
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)


@pytest.fixture
def heard():
    got: list[tuple[str, dict]] = []

    def on_end(sender, **kwargs):
        got.append(("ended", kwargs))

    def on_met(sender, **kwargs):
        got.append(("met", {"sender": sender, **kwargs}))

    job_ended.connect(on_end, weak=False)
    expectation_met.connect(on_met, weak=False)
    yield got
    job_ended.disconnect(on_end)
    expectation_met.disconnect(on_met)


def test_job_ended__once_per_job_after_the_commit_with_kind_and_outcome(
    register, make_thing, heard, django_capture_on_commit_callbacks
):
    register("test.done", lambda thing, job: None)
    things = [make_thing() for _ in range(3)]
    for thing in things:
        prescient.schedule(thing, "test.done", now=T0)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        prescient.tick(T0 + H)
        assert heard == []  # not before the commit
    for callback in callbacks:
        callback()
    ended = [kwargs for what, kwargs in heard if what == "ended"]
    assert sorted(k["history"].entity_key for k in ended) == sorted(str(t.pk) for t in things)
    assert {(k["kind"], k["outcome"]) for k in ended} == {("check", Outcome.COMPLETED)}


def test_job_ended__not_for_a_transaction_rolled_back(register, make_thing, heard, django_capture_on_commit_callbacks):
    register("test.done", lambda thing, job: None)
    thing = make_thing()
    prescient.schedule(thing, "test.done", now=T0)
    def cancel_then_roll_back() -> None:
        with transaction.atomic():
            prescient.cancel(thing, "test.done", now=T0)
            raise RuntimeError("rolled back")

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        cancel_then_roll_back()
    assert heard == []
    with django_capture_on_commit_callbacks(execute=True):
        prescient.cancel(thing, "test.done", now=T0)
    assert [(k["kind"], k["outcome"]) for _, k in heard] == [("check", Outcome.CANCELLED)]


@pytest.mark.django_db(transaction=True)  # a save is judged when its transaction commits
def test_expectation_met__at_a_save_with_its_model_and_met_at(declare, make_thing, heard,
                                                              django_capture_on_commit_callbacks):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with django_capture_on_commit_callbacks(execute=True):
        thing.status = "shipped"
        thing.save()
    [met] = [k for what, k in heard if what == "met"]
    assert met["sender"] is Thing and met["name"] == "test.expect" and met["entity_key"] == str(thing.pk)
    assert met["met_at"] is not None and met["history"].outcome == Outcome.MET
    assert [k["kind"] for what, k in heard if what == "ended"] == ["expectation"]


def test_expectation_met__at_a_rung_and_by_recheck(declare, make_thing, heard, django_capture_on_commit_callbacks):
    declare()
    at_rung, rechecked = make_thing(), make_thing()
    for thing in (at_rung, rechecked):
        prescient.expect(thing, "test.expect", now=T0)
    Thing.objects.filter(pk=at_rung.pk).update(status="shipped")
    with django_capture_on_commit_callbacks(execute=True):
        prescient.tick(T0 + 3 * H)
    Thing.objects.filter(pk=rechecked.pk).update(status="shipped")
    with django_capture_on_commit_callbacks(execute=True):
        prescient.recheck(Thing.objects.all(), now=T0 + 4 * H)
    assert [k["entity_key"] for what, k in heard if what == "met"] == [str(at_rung.pk), str(rechecked.pk)]


def test_a_receiver_that_raises__is_logged_and_the_others_still_hear(register, make_thing, heard, caplog,
                                                                     django_capture_on_commit_callbacks):
    def broken(sender, **kwargs):
        raise ValueError("listener down")

    job_ended.connect(broken, weak=False)
    try:
        register("test.done", lambda thing, job: None)
        prescient.schedule(make_thing(), "test.done", now=T0)
        with caplog.at_level(logging.ERROR, logger="prescient"), django_capture_on_commit_callbacks(execute=True):
            assert prescient.tick(T0 + H).processed == 1
    finally:
        job_ended.disconnect(broken)
    assert len(heard) == 1
    assert any("listener down" in record.getMessage() for record in caplog.records)


def announcing() -> list:
    return [c for c in connection.run_on_commit if "announce" in getattr(c[1], "__qualname__", "")]


def test_no_receiver__no_callback_is_registered(register, make_thing):
    register("test.done", lambda thing, job: None)
    prescient.schedule(make_thing(), "test.done", now=T0)
    assert not job_ended.has_listeners() and not expectation_met.has_listeners()
    with transaction.atomic():
        prescient.tick(T0 + H)
        assert announcing() == []


def test_a_receiver__one_callback_per_batch(register, make_thing, heard):
    register("test.done", lambda thing, job: None)
    for _ in range(5):
        prescient.schedule(make_thing(), "test.done", now=T0)
    with transaction.atomic():
        prescient.tick(T0 + H)
        assert len(announcing()) == 1
