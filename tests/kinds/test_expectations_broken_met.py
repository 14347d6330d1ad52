"""A broken ``met`` never breaks the host's save (issue #34, item 2): a Q naming a field its
model does not have is a ``prescient.E032`` naming the expectation at ``manage.py check``; at a
save it is logged once per process and the pending job is left to be judged at its rung. Before,
every save of the model raised FieldError (after the row was written), with or without a
pending job. A callable ``met`` that raises at a save is treated the same way."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db.models import Q

import prescient
from prescient.engine.kind import get_kind
from prescient.kinds import judging
from prescient.models import FutureJob
from tests.conftest import T0
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db
#: A save's expectations are judged when its transaction commits: these tests commit for real.
COMMITS = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_log():
    judging._logged.clear()
    yield
    judging._logged.clear()


def test_system_checks__a_met_naming_a_missing_field_is_E032_naming_the_expectation(declare):
    declare("test.typo", met=Q(statuss="shipped"))
    errors = [e for e in get_kind("expectation").system_checks() if "test.typo" in e.msg]
    assert [e.id for e in errors] == ["prescient.E032"]
    assert "statuss" in errors[0].msg and "testapp.thing" in errors[0].msg


def test_system_checks__a_good_met_is_not_reported(declare):
    declare("test.fine", met=Q(status="shipped") | Q(status__in=["gone", "lost"]))
    assert not [e for e in get_kind("expectation").system_checks() if "test.fine" in e.msg]


@COMMITS
def test_save__with_a_broken_met_and_none_pending_saves_and_logs_once(declare, make_thing, caplog):
    declare("test.typo", met=Q(statuss="shipped"))
    thing = make_thing()
    with caplog.at_level(logging.ERROR, logger="prescient"):
        for status in ("packed", "shipped", "packed"):
            thing.status = status
            thing.save()
    assert Thing.objects.get(pk=thing.pk).status == "packed"
    logged = [r for r in caplog.records if "test.typo" in r.getMessage()]
    assert len(logged) == 1 and "judged at their rungs" in logged[0].getMessage()


def test_save__with_a_broken_met_and_one_pending_leaves_it_to_its_rung(declare, make_thing):
    thing = make_thing()
    declare("test.typo", met=Q(status="shipped"))  # declared right for expect()'s own look...
    job = prescient.expect(thing, "test.typo", now=T0)
    calls = declare("test.typo", met=Q(statuss="shipped"))  # ...then broken, as a typo deployed
    assert job is not None
    thing.status = "shipped"
    thing.save()  # does not raise
    assert FutureJob.objects.filter(pk=job.pk).exists()  # not judged at the save
    assert calls == []


@COMMITS
def test_save__a_callable_met_that_raises_does_not_break_the_save(declare, make_thing, caplog):
    def broken(thing: Thing) -> bool:
        raise RuntimeError("met blew up")

    thing = make_thing()
    declare("test.raises", met=lambda thing: False)
    job = prescient.expect(thing, "test.raises", now=T0)
    declare("test.raises", met=broken)
    assert job is not None
    with caplog.at_level(logging.ERROR, logger="prescient"):
        thing.status = "shipped"
        thing.save()
    assert FutureJob.objects.filter(pk=job.pk).exists()
    assert any("met blew up" in r.getMessage() for r in caplog.records)


@COMMITS
def test_a_good_met_still_ends_the_job_at_save(declare, make_thing):
    declare("test.good", ladder=[timedelta(hours=3)])
    thing = make_thing()
    job = prescient.expect(thing, "test.good", now=T0)
    assert job is not None
    thing.status = "shipped"
    thing.save()
    assert not FutureJob.objects.filter(pk=job.pk).exists()
