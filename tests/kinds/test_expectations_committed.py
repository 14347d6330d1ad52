"""The committed state decides (issue #34, items 3 and 4).

A save is judged once its transaction commits, on what it committed: met then un-met in one
transaction ends nothing, a rollback ends nothing, and a process that dies between the commit
and the judgement leaves the job to its next rung, which finds it met without calling the
handler. At a rung the instance is read again in the transaction that records the rung, so a
change committed after the batch was prepared is seen before the handler is called.

These tests commit for real (``transaction=True``): a test's own transaction never commits.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import prescient
from prescient.kinds.expectations import ExpectationKind, reached_of
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from tests.conftest import T0
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db(transaction=True)

H = timedelta(hours=1)


def pending(thing: Thing, name: str = "test.expect") -> FutureJob | None:
    return FutureJob.objects.filter(entity_key=str(thing.pk), job_exec=name).first()


def ended(thing: Thing, name: str = "test.expect") -> JobHistory:
    return JobHistory.objects.get(entity_key=str(thing.pk), job_exec=name)


# --- at save: what the transaction committed ---------------------------------------------------


def test_met_then_unmet_in_one_committed_transaction__ends_nothing(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with transaction.atomic():
        thing.status = "shipped"
        thing.save()
        thing.status = "packed"  # the shipment was undone before the commit
        thing.save()
    assert pending(thing) is not None and not JobHistory.objects.exists()
    prescient.tick(T0 + 3 * H)
    assert calls == [(thing.pk, 1)]  # its rung climbs as for any order not shipped


def test_unmet_then_met_in_one_transaction__ends_it_met_once_committed(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with transaction.atomic():
        thing.status = "packed"
        thing.save()
        thing.status = "shipped"
        thing.save()
        assert pending(thing) is not None  # not judged before the commit
    assert pending(thing) is None and ended(thing).outcome == Outcome.MET


def test_saves_of_one_row_in_a_transaction__are_judged_once_at_its_commit(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with CaptureQueriesContext(connection) as seen, transaction.atomic():
        for status in ("packed", "weighed", "shipped"):
            thing.status = status
            thing.save()
    judged = [q["sql"] for q in seen.captured_queries if "prescient_futurejob" in q["sql"] and "EXISTS" in q["sql"]]
    assert len(judged) == 1
    assert ended(thing).outcome == Outcome.MET


def test_a_deletion_rolled_back__ends_nothing_and_one_committed_ends_it_entity_missing(declare, make_thing):
    declare()
    thing = make_thing()
    key = str(thing.pk)
    prescient.expect(thing, "test.expect", now=T0)

    def delete_then_fail() -> None:
        with transaction.atomic():
            Thing.objects.get(pk=thing.pk).delete()
            raise RuntimeError("changed our mind")

    with pytest.raises(RuntimeError):
        delete_then_fail()
    assert pending(thing) is not None
    thing.delete()
    assert JobHistory.objects.get(entity_key=key).outcome == Outcome.ENTITY_MISSING


def test_a_crash_between_the_commit_and_the_judgement__is_caught_at_the_next_rung(declare, make_thing):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)

    def the_process_dies() -> None:  # the host's own hook, run first: the judgement never comes
        raise SystemError("the process died after the commit")

    def ship() -> None:
        with transaction.atomic():
            transaction.on_commit(the_process_dies)
            thing.status = "shipped"
            thing.save()

    with pytest.raises(SystemError):
        ship()
    assert Thing.objects.get(pk=thing.pk).status == "shipped"  # committed
    assert pending(thing) is not None  # not judged
    summary = prescient.tick(T0 + 3 * H)
    assert summary.counts["met"] == 1 and calls == []
    assert ended(thing).payload["met_at"] == (T0 + 3 * H).isoformat()


def test_an_expectation_started_after_the_statement_was_compiled__is_met_by_the_next_save(declare, make_thing):
    declare()
    thing = make_thing()
    thing.save()  # compiles the model's statement, nothing pending
    prescient.expect(thing, "test.expect", now=T0)
    thing.status = "shipped"
    thing.save()
    assert ended(thing).outcome == Outcome.MET


def test_an_expectation_declared_later_on_the_model__is_judged_by_the_next_save(declare, make_thing):
    declare()
    thing = make_thing()
    thing.save()  # compiled with test.expect alone
    declare("test.later", met=lambda t: t.name == "done")
    prescient.expect(thing, "test.later", now=T0)
    thing.name = "done"
    thing.save()
    assert ended(thing, "test.later").outcome == Outcome.MET
    assert pending(thing, "test.later") is None


def test_recheck__ends_entity_missing_a_row_deleted_behind_the_orms_back(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Thing._meta.db_table} WHERE id = %s", [thing.pk])
    assert prescient.recheck([thing]) == 1
    assert ended(thing).outcome == Outcome.ENTITY_MISSING


# --- at a rung: read again in the transaction that records it ---------------------------------


@pytest.fixture
def after_prepare(monkeypatch):
    """``after_prepare(fn)``: call ``fn`` once a tick has prepared its batch (instances loaded,
    met asked in bulk) and before any rung runs: a change committed in between."""

    def install(fn: Any) -> None:
        prepare = ExpectationKind.prepare

        def prepared(self: ExpectationKind, jobs: Any) -> Any:
            contexts = prepare(self, jobs)
            fn()
            return contexts

        monkeypatch.setattr(ExpectationKind, "prepare", prepared)

    return install


def test_met_committed_after_the_batch_was_prepared__the_handler_is_not_called(declare, make_thing, after_prepare):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    after_prepare(lambda: Thing.objects.filter(pk=thing.pk).update(status="shipped"))
    summary = prescient.tick(T0 + 3 * H)
    assert calls == []
    assert summary.counts["met"] == 1
    assert ended(thing).payload["met_at"] == (T0 + 3 * H).isoformat()


def test_a_row_deleted_after_the_batch_was_prepared__ends_entity_missing_unclimbed(
    declare, make_thing, after_prepare
):
    calls = declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)

    def delete() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {Thing._meta.db_table} WHERE id = %s", [thing.pk])

    after_prepare(delete)
    prescient.tick(T0 + 3 * H)
    assert calls == []
    assert ended(thing).outcome == Outcome.ENTITY_MISSING


def test_a_job_cancelled_while_its_rung_starts__calls_no_handler(declare, make_thing, after_prepare):
    calls = declare()
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    after_prepare(lambda: prescient.cancel(thing, "test.expect"))  # in flight: its end is requested
    prescient.tick(T0 + 3 * H)
    assert calls == []
    assert ended(thing).outcome == Outcome.CANCELLED


def test_a_climbed_rung__records_when_its_instance_was_read(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    prescient.tick(T0 + 3 * H)
    prescient.tick(T0 + 6 * H)
    job = pending(thing)
    assert job is not None and job.payload["step"] == 2
    reached = reached_of(job)
    assert len(reached) == 2 and reached[0] <= reached[1]
