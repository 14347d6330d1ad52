"""One name, one kind (issue #34, item 1): an expectation's name given to a face of
``schedule()`` is refused with an error that names ``expect()``, before anything is written;
``expect()`` given a check names ``schedule()``. Before, ``schedule(order, "shop.shipped")``
made a check job that failed at every run, and ``expect()`` on a check said "Unknown check"."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import prescient
from prescient.exceptions import UnknownCheck, WrongKind
from prescient.models import FutureJob
from tests.conftest import T0

pytestmark = pytest.mark.django_db


def test_schedule__an_expectations_name_is_refused_naming_expect(declare, make_thing):
    declare()
    thing = make_thing()
    refused = r"'test\.expect' is an expectation.*prescient\.expect\(instance, 'test\.expect'\)"
    with pytest.raises(WrongKind, match=refused):
        prescient.schedule(thing, "test.expect", now=T0)
    with pytest.raises(WrongKind, match="prescient.expect"):
        prescient.schedule_many([thing, make_thing()], "test.expect", now=T0)
    assert not FutureJob.objects.exists()


def test_schedule__the_expectations_handler_is_refused_too(declare, make_thing):
    declare()
    from prescient.expectations import get_expectation

    with pytest.raises(WrongKind, match="prescient.expect"):
        prescient.schedule(make_thing(), get_expectation("test.expect").func, now=T0)
    assert not FutureJob.objects.exists()


def test_expect__a_checks_name_or_function_is_refused_naming_schedule(declare, make_thing):
    declare()
    thing = make_thing()
    refused = r"'test\.record' is a check.*prescient\.schedule\(instance, 'test\.record'\)"
    with pytest.raises(WrongKind, match=refused):
        prescient.expect(thing, "test.record", now=T0)
    from prescient.checks import get_check

    with pytest.raises(WrongKind, match="prescient.schedule"):
        prescient.expect(thing, get_check("test.record").func, now=T0)
    with pytest.raises(UnknownCheck):  # a name of nothing stays unknown
        prescient.expect(thing, "test.nothing", now=T0)
    assert not FutureJob.objects.exists()


def test_expect__still_starts_the_expectation(declare, make_thing):
    declare()
    job = prescient.expect(make_thing(), "test.expect", now=T0)
    assert job is not None and job.kind == "expectation"


@pytest.mark.parametrize("dry_run", [False, True])
def test_prescient_schedule__refuses_an_expectation(declare, make_thing, dry_run):
    declare()
    thing = make_thing()
    args = ["prescient_schedule", "--check", "test.expect", "--entity", f"testapp.thing:{thing.pk}"]
    with pytest.raises(CommandError, match="is an expectation.*prescient.expect"):
        call_command(*args, *(["--dry-run"] if dry_run else []), stdout=StringIO(), stderr=StringIO())
    assert not FutureJob.objects.exists()


def test_prescient_backfill__refuses_an_expectation(declare, make_thing):
    declare()
    make_thing()
    with pytest.raises(CommandError, match="is an expectation"):
        call_command("prescient_backfill", "testapp.Thing", "test.expect", stdout=StringIO(), stderr=StringIO())
    assert not FutureJob.objects.exists()


def test_a_recurring_schedule__of_an_expectation_is_refused_naming_expect(declare, make_thing):
    declare()
    from prescient.exceptions import InvalidSchedule
    from prescient.schedules import check_spec

    with pytest.raises(InvalidSchedule, match="is an expectation.*prescient.expect"):
        check_spec("nightly", "test.expect", make_thing(), cron="0 3 * * *")
