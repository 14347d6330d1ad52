"""Scheduling and cancelling (rules 1, 2, 6) and bad input that must write nothing."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import IntegrityError, transaction

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import State
from tests.testapp.models import Other
from tests.testapp.prescient_checks import record

pytestmark = pytest.mark.django_db


def test_schedule__delay_rounds_up_to_the_slot(make_thing, t0):
    job = prescient.schedule(make_thing(), "test.record", delay=timedelta(hours=3, minutes=5), now=t0)
    assert job.first_check_at == job.next_check_at == t0 + timedelta(hours=3, minutes=15)
    assert job.state == State.SCHEDULED
    assert job.check_count == 0
    assert job.entity_name == "testapp.thing"
    assert job.job_exec == "test.record"


def test_schedule__at_rounds_up_and_without_either_is_due_in_the_current_slot(make_thing, t0):
    at = prescient.schedule(make_thing(), "test.record", at=t0 + timedelta(minutes=1), now=t0)
    assert at.next_check_at == t0 + timedelta(minutes=15)
    plain = prescient.schedule(make_thing(), "test.record", now=t0 + timedelta(minutes=2))
    assert plain.next_check_at == t0 + timedelta(minutes=15)


def test_schedule__accepts_the_check_function(make_thing, t0):
    job = prescient.schedule(make_thing(), record, now=t0)
    assert job.job_exec == "test.record"


def test_schedule_again__returns_the_pending_job_unchanged(make_thing, t0):
    thing = make_thing()
    first = prescient.schedule(thing, "test.record", delay=timedelta(hours=1), now=t0)
    again = prescient.schedule(thing, "test.record", delay=timedelta(hours=5), now=t0)
    assert again.pk == first.pk
    assert again.next_check_at == first.next_check_at
    assert FutureJob.objects.count() == 1


def test_replace__moves_the_due_time_but_not_first_check(make_thing, t0):
    thing = make_thing()
    first = prescient.schedule(thing, "test.record", delay=timedelta(hours=1), now=t0)
    moved = prescient.schedule(thing, "test.record", delay=timedelta(hours=5), replace=True, now=t0)
    assert moved.pk == first.pk
    moved.refresh_from_db()
    assert moved.next_check_at == t0 + timedelta(hours=5)
    assert moved.first_check_at == t0 + timedelta(hours=1)


def test_one_pending_job__is_enforced_by_the_database(make_thing, t0):
    thing = make_thing()
    job = prescient.schedule(thing, "test.record", now=t0)
    duplicate = FutureJob(
        entity_name=job.entity_name, entity_key=job.entity_key, job_exec=job.job_exec,
        first_check_at=t0, next_check_at=t0, created_at=t0,
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        duplicate.save()


def test_different_checks_or_entities__are_separate_jobs(make_thing, register, t0):
    register("test.other", lambda thing, job: None)
    a, b = make_thing(), make_thing()
    prescient.schedule(a, "test.record", now=t0)
    prescient.schedule(a, "test.other", now=t0)
    prescient.schedule(b, "test.record", now=t0)
    assert FutureJob.objects.count() == 3


def test_cancel__ends_the_job_with_one_history_row(make_thing, t0):
    thing = make_thing()
    prescient.schedule(thing, "test.record", now=t0)
    assert prescient.cancel(thing, "test.record", now=t0 + timedelta(minutes=1)) is True
    assert not FutureJob.objects.exists()
    row = JobHistory.objects.get()
    assert row.outcome == "cancelled"
    assert row.finished_at == t0 + timedelta(minutes=1)
    assert prescient.cancel(thing, "test.record", now=t0) is False
    assert JobHistory.objects.count() == 1


# --- bad input: a clear error naming the problem, and nothing written --------------------------


def _nothing_written():
    assert not FutureJob.objects.exists()
    assert not JobHistory.objects.exists()


def test_bad_input__unknown_check(make_thing, t0):
    with pytest.raises(prescient.UnknownCheck, match="'no.such.check'"):
        prescient.schedule(make_thing(), "no.such.check", now=t0)
    assert issubclass(prescient.UnknownCheck, ValueError)
    _nothing_written()


def test_bad_input__unregistered_function(make_thing, t0):
    def not_a_check(thing, job):
        return None

    with pytest.raises(prescient.UnknownCheck, match="not_a_check"):
        prescient.schedule(make_thing(), not_a_check, now=t0)
    _nothing_written()


def test_bad_input__naive_datetime(make_thing, t0):
    with pytest.raises(prescient.InvalidTime, match="at 2026-11-22T13:00:00 is naive"):
        prescient.schedule(make_thing(), "test.record", at=datetime(2026, 11, 22, 13, 0), now=t0)
    _nothing_written()


def test_bad_input__naive_now(make_thing):
    with pytest.raises(prescient.InvalidTime, match="now .* is naive"):
        prescient.schedule(make_thing(), "test.record", now=datetime(2026, 11, 22, 13, 0))
    _nothing_written()


def test_bad_input__entity_of_the_wrong_model(t0):
    other = Other.objects.create()
    with pytest.raises(prescient.InvalidEntity, match="about testapp.thing, got an instance of testapp.other"):
        prescient.schedule(other, "test.record", now=t0)
    _nothing_written()


def test_bad_input__unsaved_entity_and_non_model(t0):
    from tests.testapp.models import Thing

    with pytest.raises(prescient.InvalidEntity, match="not saved"):
        prescient.schedule(Thing(), "test.record", now=t0)
    with pytest.raises(prescient.InvalidEntity, match="needs a model instance, got dict"):
        prescient.schedule({"id": 1}, "test.record", now=t0)  # type: ignore[arg-type]
    _nothing_written()


def test_bad_input__both_at_and_delay_or_bad_delay(make_thing, t0):
    thing = make_thing()
    with pytest.raises(prescient.InvalidTime, match="either at or delay"):
        prescient.schedule(thing, "test.record", at=t0, delay=timedelta(hours=1), now=t0)
    with pytest.raises(prescient.InvalidTime, match="delay must be a timedelta, got int"):
        prescient.schedule(thing, "test.record", delay=3600, now=t0)  # type: ignore[arg-type]
    _nothing_written()


@pytest.mark.parametrize("delay", [timedelta(hours=-1), timedelta(microseconds=-1)])
def test_bad_input__a_negative_delay_is_refused_not_taken_for_now(make_thing, t0, delay):
    with pytest.raises(ValueError, match="delay must not be negative") as raised:
        prescient.schedule(make_thing(), "test.record", delay=delay, now=t0)
    assert isinstance(raised.value, prescient.InvalidTime)
    _nothing_written()


def test_zero_delay__is_due_now(make_thing, t0):
    job = prescient.schedule(make_thing(), "test.record", delay=timedelta(0), now=t0)
    assert job.next_check_at == t0


def test_bad_input__beyond_the_horizon(make_thing, t0):
    with pytest.raises(prescient.InvalidTime, match="beyond the horizon"):
        prescient.schedule(make_thing(), "test.record", delay=timedelta(days=31), now=t0)
    _nothing_written()


def test_past_at__is_due_at_once(make_thing, t0):
    job = prescient.schedule(make_thing(), "test.record", at=t0 - timedelta(hours=2, minutes=5), now=t0)
    assert job.next_check_at == t0 - timedelta(hours=2)
    assert FutureJob.objects.due(t0).count() == 1


def test_duplicate_name_with_another_function__is_refused(register):
    register("test.dup", lambda thing, job: None)

    def another(thing, job):
        return None

    with pytest.raises(prescient.AlreadyRegistered, match="test.dup"):
        prescient.check("test.dup", model="testapp.Thing")(another)


def test_registration__model_label_is_validated():
    with pytest.raises(ValueError, match="app_label.ModelName"):
        prescient.check("test.badmodel", model="Thing")


def test_utc_offsets__other_zones_are_accepted(make_thing, t0):
    tz = timezone(timedelta(hours=-5))
    job = prescient.schedule(make_thing(), "test.record", at=datetime(2026, 11, 22, 6, 10, tzinfo=tz), now=t0)
    assert job.next_check_at == datetime(2026, 11, 22, 11, 15, tzinfo=UTC)
