"""Expectations (``@prescient.expectation``, ``prescient.expect``): the ladder climbed rung by
rung, met at a save or at a rung, missed after the last, on SQLite and PostgreSQL, time passed
in as ``now``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings

import prescient
from prescient.engine.kind import get_kind
from prescient.exceptions import AlreadyRegistered, InvalidEntity, UnknownCheck
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from tests.conftest import T0
from tests.testapp.models import Other, Thing

pytestmark = pytest.mark.django_db
#: A save's expectations are judged when its transaction commits: these tests commit for real.
COMMITS = pytest.mark.django_db(transaction=True)

H = timedelta(hours=1)


def pending(thing: Thing) -> FutureJob | None:
    return FutureJob.objects.filter(entity_key=str(thing.pk), job_exec="test.expect").first()


def ended(thing: Thing) -> JobHistory:
    return JobHistory.objects.get(entity_key=str(thing.pk), job_exec="test.expect")


# --- expect() --------------------------------------------------------------------------------------


def test_expect__creates_one_job_due_at_the_first_rung(declare, make_thing):
    declare()
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    assert (job.kind, job.job_exec, job.state) == ("expectation", "test.expect", "scheduled")
    assert job.next_check_at == job.first_check_at == T0 + 3 * H
    assert job.payload["rungs"] == [(T0 + n * H).isoformat() for n in (3, 6, 24)]
    assert job.payload["step"] == 0


def test_expect__again_returns_the_pending_job_unchanged(declare, make_thing):
    declare()
    thing = make_thing()
    first = prescient.expect(thing, "test.expect", now=T0)
    again = prescient.expect(thing, "test.expect", start=T0 + 5 * H, now=T0 + H)
    assert again is not None and first is not None
    assert again.pk == first.pk and again.next_check_at == T0 + 3 * H
    assert FutureJob.objects.count() == 1


def test_expect__already_met_creates_nothing_and_returns_none(declare, make_thing):
    declare()
    assert prescient.expect(make_thing(status="shipped"), "test.expect", now=T0) is None
    assert not FutureJob.objects.exists()


def test_expect__counts_from_start_rounded_up_to_a_slot(declare, make_thing):
    declare()
    job = prescient.expect(make_thing(), "test.expect", start=T0 - 2 * H + timedelta(minutes=1), now=T0)
    assert job is not None and job.next_check_at == T0 + H + timedelta(minutes=15)


def test_expect__by_handler_and_refusals(declare, make_thing):
    declare()
    from prescient.expectations import get_expectation

    job = prescient.expect(make_thing(), get_expectation("test.expect").func, now=T0)
    assert job is not None
    with pytest.raises(UnknownCheck):
        prescient.expect(make_thing(), "test.nope", now=T0)
    with pytest.raises(InvalidEntity, match="about testapp.thing"):
        prescient.expect(Other.objects.create(), "test.expect", now=T0)


def test_expectation__cannot_take_a_name_registered_to_other_code(register):
    def a_check(thing: Thing, job: FutureJob) -> None: ...

    def a_handler(thing: Thing, job: FutureJob, step: int) -> None: ...

    register("test.taken", a_check)
    declare_it = prescient.expectation("test.taken", model="testapp.Thing", met=lambda thing: True, ladder=[H])
    with pytest.raises(AlreadyRegistered, match="test.taken"):
        declare_it(a_handler)
    assert prescient.get_check("test.taken").kind == "check"


# --- the ladder ------------------------------------------------------------------------------------


def test_rungs__each_once_with_its_step_then_missed(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    assert prescient.tick(T0 + 3 * H - timedelta(minutes=15)).processed == 0
    assert prescient.tick(T0 + 3 * H).processed == 1
    assert calls == [(thing.pk, 1)]
    job = pending(thing)
    assert job is not None and job.next_check_at == T0 + 6 * H and job.payload["step"] == 1
    assert prescient.tick(T0 + 3 * H).processed == 0  # the same rung is not run twice
    prescient.tick(T0 + 6 * H)
    assert calls == [(thing.pk, 1), (thing.pk, 2)]
    prescient.tick(T0 + 24 * H)
    assert calls == [(thing.pk, 1), (thing.pk, 2), (thing.pk, 3)]
    assert pending(thing) is None
    row = ended(thing)
    assert row.outcome == Outcome.MISSED and row.payload["step"] == 3 and row.run_count == 3


@override_settings(PRESCIENT={"SLOT_MINUTES": 15, "TIMEOUT_SECONDS": 2, "MAX_CHECKS": 0})
def test_rungs__max_checks_does_not_cut_the_ladder_short(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    for hours in (3, 6, 24):
        prescient.tick(T0 + hours * H)
    assert [step for _, step in calls] == [1, 2, 3]
    assert ended(thing).outcome == Outcome.MISSED


def test_rungs__a_late_tick_climbs_one_rung_at_a_time(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    prescient.tick(T0 + 30 * H)  # every rung has passed: one rung per pass, the next due at once
    assert calls == [(thing.pk, 1)]
    job = pending(thing)
    assert job is not None and job.next_check_at == T0 + 30 * H + timedelta(minutes=15)


def test_met_before_the_first_rung__ends_met_without_the_handler(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    Thing.objects.filter(pk=thing.pk).update(status="shipped")  # no signal: the rung finds it met
    summary = prescient.tick(T0 + 3 * H)
    assert summary.counts["met"] == 1 and "met=1" in summary.line()
    assert calls == []
    row = ended(thing)
    assert row.outcome == Outcome.MET and row.payload["met_at"] == (T0 + 3 * H).isoformat()


@COMMITS
def test_met_between_rungs_via_save__ends_met_at_once(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    prescient.tick(T0 + 3 * H)
    thing.status = "shipped"
    thing.save()
    assert pending(thing) is None
    row = ended(thing)
    assert row.outcome == Outcome.MET and row.reason == "met at save" and "met_at" in row.payload
    prescient.tick(T0 + 6 * H)
    assert calls == [(thing.pk, 1)]


def test_met_between_rungs_via_queryset_update__the_next_rung_ends_it_met(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    prescient.tick(T0 + 3 * H)
    Thing.objects.filter(pk=thing.pk).update(status="shipped")
    assert pending(thing) is not None  # update() sends no signal
    prescient.tick(T0 + 6 * H)
    assert calls == [(thing.pk, 1)]
    assert ended(thing).outcome == Outcome.MET


@COMMITS
def test_met_at_save__judged_when_the_saving_transaction_commits_and_a_rollback_keeps_it_pending(
    declare, make_thing
):
    # Issue #34 item 3: the committed state decides. Before, the job ended inside the saving
    # transaction (this test asserted so); now it ends once that transaction commits.
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    seen: list[bool] = []

    def ship_then_fail() -> None:
        with transaction.atomic():
            thing.status = "shipped"
            thing.save()
            seen.append(pending(thing) is not None)  # inside it: not judged yet
            raise RuntimeError("the order could not be shipped after all")

    with pytest.raises(RuntimeError, match="after all"):
        ship_then_fail()
    assert seen == [True]
    assert pending(thing) is not None
    assert not JobHistory.objects.exists()
    with transaction.atomic():
        thing.status = "shipped"
        thing.save()
        assert pending(thing) is not None
    assert pending(thing) is None and ended(thing).outcome == Outcome.MET


def test_save_that_does_not_meet__leaves_it_pending(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    thing.status = "packed"
    thing.save()
    assert pending(thing) is not None


@COMMITS
def test_save__costs_one_query_more_at_most_and_none_for_other_models(
    declare, make_thing, django_assert_num_queries
):
    """On PostgreSQL the table's save trigger judges the row at the commit and names it only
    when a pending expectation is met (or its row gone), so a save that ends nothing costs its
    UPDATE alone; elsewhere (SQLite, no trigger) each save asks once after its commit."""
    declare()
    thing, other = make_thing(), Other.objects.create()
    asks = 0 if connection.vendor == "postgresql" else 1
    with django_assert_num_queries(1):  # its UPDATE: no expectation is about this model
        other.save()
    with django_assert_num_queries(1 + asks):  # the UPDATE, then the pending jobs with met beside them
        thing.save()
    prescient.expect(thing, "test.expect", now=T0)
    thing.status = "packed"
    with django_assert_num_queries(1 + asks):
        thing.save()
    assert pending(thing) is not None
    thing.status = "shipped"
    thing.save()  # met: named (or asked), then ended
    assert pending(thing) is None and ended(thing).outcome == Outcome.MET


@COMMITS
def test_deleted_instance__ends_entity_missing(declare, make_thing):
    declare()
    thing = make_thing()
    key = str(thing.pk)
    prescient.expect(thing, "test.expect", now=T0)
    thing.delete()
    assert not FutureJob.objects.exists()
    assert JobHistory.objects.get(entity_key=key).outcome == Outcome.ENTITY_MISSING


def test_met_callable__asked_at_the_rung(declare, make_thing):
    calls = declare(met=lambda thing: thing.name == "done")
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    prescient.tick(T0 + 3 * H)
    Thing.objects.filter(pk=thing.pk).update(name="done")
    prescient.tick(T0 + 6 * H)
    assert calls == [(thing.pk, 1)]
    assert ended(thing).outcome == Outcome.MET


def test_a_raising_handler__is_retried_at_the_same_rung(declare, make_thing):
    steps: list[int] = []

    def flaky(thing: Thing, job: FutureJob, step: int) -> None:
        steps.append(step)
        if len(steps) == 1:
            raise ConnectionError("the mail server is down")

    declare(handler=flaky)
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    assert prescient.tick(T0 + 3 * H).counts["retried"] == 1
    job = pending(thing)
    assert job is not None and job.payload["step"] == 0 and job.failure_count == 1
    assert "mail server is down" in job.last_error
    assert job.next_check_at == T0 + 3 * H + timedelta(minutes=15)
    prescient.tick(T0 + 3 * H + timedelta(minutes=15))
    assert steps == [1, 1]
    job = pending(thing)
    assert job is not None and job.payload["step"] == 1 and job.next_check_at == T0 + 6 * H


def test_a_handler_failing_past_its_retries__ends_failed(declare, make_thing):
    def broken(thing: Thing, job: FutureJob, step: int) -> None:
        raise ValueError("broken")

    declare(handler=broken, max_retries=1)
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    prescient.tick(T0 + 3 * H)
    assert pending(thing) is not None
    prescient.tick(T0 + 3 * H + timedelta(minutes=15))
    assert ended(thing).outcome == Outcome.FAILED


def test_signal__sent_after_the_handler_with_its_arguments(declare, make_thing):
    order: list[str] = []
    received: list[dict[str, object]] = []

    def handler(thing: Thing, job: FutureJob, step: int) -> None:
        order.append("handler")

    def receiver(sender: object, **kwargs: object) -> None:
        order.append("signal")
        received.append({"sender": sender, **kwargs})

    declare(handler=handler)
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    prescient.signals.expectation_missed.connect(receiver)
    try:
        prescient.tick(T0 + 3 * H)
        Thing.objects.filter(pk=thing.pk).update(status="shipped")
        prescient.tick(T0 + 6 * H)  # met: neither handler nor signal
    finally:
        prescient.signals.expectation_missed.disconnect(receiver)
    assert order == ["handler", "signal"]
    [got] = received
    assert got["sender"] is Thing and got["name"] == "test.expect" and got["step"] == 1
    assert got["instance"] == thing and got["job"].pk == job.pk  # type: ignore[attr-defined]


def test_signal__a_raising_receiver_does_not_undo_the_rung(declare, make_thing):
    calls = declare()

    def receiver(sender: object, **kwargs: object) -> None:
        raise RuntimeError("listener broke")

    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    prescient.signals.expectation_missed.connect(receiver)
    try:
        prescient.tick(T0 + 3 * H)
    finally:
        prescient.signals.expectation_missed.disconnect(receiver)
    job = pending(thing)
    assert calls == [(thing.pk, 1)] and job is not None and job.payload["step"] == 1 and job.failure_count == 0


# --- declarations checked ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ladder", "message"),
    [
        ([], "empty ladder"),
        ([timedelta(hours=6), timedelta(hours=3)], "rising offsets"),
        ([timedelta(hours=3), timedelta(hours=3)], "rising offsets"),
        ([timedelta(days=31)], "beyond the horizon"),
    ],
)
def test_system_checks__refuse_bad_ladders(declare, ladder, message):
    declare("test.bad", ladder=ladder)
    errors = [e for e in get_kind("expectation").system_checks() if "test.bad" in e.msg]
    assert [e.id for e in errors] == ["prescient.E032"]
    assert message in errors[0].msg


def test_system_checks__refuse_an_unknown_calendar(declare):
    declare("test.bad", calendar="nowhere")
    errors = [e for e in get_kind("expectation").system_checks() if "test.bad" in e.msg]
    assert errors and "nowhere" in errors[0].msg


def test_expectation__refuses_what_is_not_a_q_or_callable():
    with pytest.raises(TypeError, match="met must be"):
        prescient.expectation("test.bad", model="testapp.Thing", met="shipped", ladder=[H])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ladder"):
        prescient.expectation("test.bad", model="testapp.Thing", met=lambda t: True, ladder=[3])  # type: ignore[list-item]
