"""The save notices (issue #34, item 7): on PostgreSQL triggers on each watched table judge the
rows each UPDATE or DELETE writes and name one only when there is something to end, so a save that ends
nothing asks nothing more; whatever the trigger cannot say (no trigger, an older one, a judgement
that fails, a commit that was not the database's) is judged by asking, never missed."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import F, Q
from django.test.utils import CaptureQueriesContext

import prescient
from prescient import expectations
from prescient.kinds import commit_notices, watch_triggers
from prescient.kinds.commit_notices import Heard
from prescient.models import FutureJob, JobHistory
from prescient.states import Outcome
from prescient.system_checks import check_save_triggers
from tests.conftest import T0
from tests.testapp.models import Other, Thing

TABLE = Thing._meta.db_table
H = timedelta(hours=1)


def noop(thing: Thing, job: FutureJob, step: int) -> None:
    pass


def judged(seen: CaptureQueriesContext) -> int:
    """The judgements asked after a commit (the compiled statement reads the live table with
    EXISTS beside it)."""
    return sum(1 for q in seen.captured_queries if "prescient_futurejob" in q["sql"] and "EXISTS" in q["sql"])


def triggers() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, p.proname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_proc p ON p.oid = t.tgfoid WHERE t.tgname = %s", [watch_triggers.TRIGGER],
        )
        return dict(cursor.fetchall())


# --- what a connection heard (no database) ---------------------------------------------------------


class _Said:
    def __init__(self, message: str) -> None:
        self.message_primary = message


def test_heard__keeps_the_rows_named_and_forgets_them_once_taken_or_settled():
    heard = Heard()
    heard(_Said(f"{commit_notices.PREFIX}testapp_thing:4"))
    heard(_Said("some other notice of the host's"))
    assert heard.take("testapp_thing", 4) and not heard.take("testapp_thing", 4)
    assert not heard.take("testapp_thing", 5)
    heard(_Said(f"{commit_notices.PREFIX}testapp_thing:5"))
    heard.settle()
    assert not heard.take("testapp_thing", 5)


def test_heard__past_its_bound_names_every_row(monkeypatch):
    """A bulk update that names more rows than are kept: every row noted is judged by asking."""
    monkeypatch.setattr(commit_notices, "MOST_HEARD", 2)
    heard = Heard()
    for pk in range(3):
        heard(_Said(f"{commit_notices.PREFIX}t:{pk}"))
    assert heard.take("t", 99)  # cannot be told: judged
    heard.settle()
    assert not heard.take("t", 99)


# --- the trigger, installed ------------------------------------------------------------------------


@pytest.mark.parametrize("ends", ["met", "deleted"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_save_that_ends_nothing_asks_nothing__one_that_ends_a_job_is_named_and_judged(declare, make_thing, ends):
    declare()
    assert commit_notices.missing() == [] and TABLE in triggers()
    thing, bystander = make_thing(), make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with CaptureQueriesContext(connection) as seen:
        bystander.save()  # none pending
        thing.status = "packed"
        thing.save()  # one pending, not met
        with transaction.atomic():
            thing.save()
            bystander.save()
    assert judged(seen) == 0 and FutureJob.objects.count() == 1
    key = str(thing.pk)
    with CaptureQueriesContext(connection) as seen:
        if ends == "met":
            thing.status = "shipped"
            thing.save()
        else:
            thing.delete()
    assert judged(seen) == 1
    outcome = Outcome.MET if ends == "met" else Outcome.ENTITY_MISSING
    assert JobHistory.objects.get(entity_key=key).outcome == outcome and not FutureJob.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_the_notice_reaches_the_process_whatever_the_host_set_client_min_messages_to(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with connection.cursor() as cursor:
        cursor.execute("SET client_min_messages = error")
    try:
        thing.status = "shipped"
        thing.save()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET client_min_messages")
    assert JobHistory.objects.get(entity_key=str(thing.pk)).outcome == Outcome.MET


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_callable_met_is_named_whenever_a_job_is_pending__python_asks_it(declare, make_thing):
    declare(met=lambda thing: thing.name == "done")
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with CaptureQueriesContext(connection) as seen:
        thing.name = "not yet"
        thing.save()
    assert judged(seen) == 1 and FutureJob.objects.exists()
    thing.name = "done"
    thing.save()
    assert JobHistory.objects.get(entity_key=str(thing.pk)).outcome == Outcome.MET


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_judgement_that_fails_in_the_trigger__names_the_row_and_the_hosts_commit_stands(
    declare, make_thing, caplog
):
    """A ``met`` that compiles but fails when PostgreSQL runs it on the row committed (its
    status taken as a regular expression, and "(" is none): the trigger names the row instead of
    failing the commit; Python's judgement fails too, is logged, and the job waits for its rung."""
    declare(met=Q(name__regex=F("status")))
    thing = make_thing(name="a", status="b")  # "a" does not match "b": not met
    prescient.expect(thing, "test.expect", now=T0)
    with caplog.at_level(logging.WARNING, logger="prescient"), transaction.atomic():
        thing.status = "("
        thing.save()
    assert Thing.objects.get(pk=thing.pk).status == "("  # committed
    assert FutureJob.objects.filter(entity_key=str(thing.pk)).exists()
    assert any("could not be judged" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_without_a_current_trigger__each_save_asks_and_the_check_says_so(declare, make_thing):
    """A model watched (or a met changed) after the last migrate: its table's trigger is older
    than the declarations, so it is not trusted; saves ask, W014 names the table, migrate mends
    it."""
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    expectations.unregister("test.expect")  # the met changed in code; the trigger still asks "shipped"
    prescient.expectation("test.expect", model="testapp.Thing", met=Q(status="delivered"), ladder=[H])(noop)
    assert commit_notices.missing() == [TABLE]
    (warning,) = check_save_triggers(databases=["default"])
    assert warning.id == "prescient.W014" and TABLE in warning.msg
    with CaptureQueriesContext(connection) as seen:
        thing.status = "shipped"
        thing.save()
    assert judged(seen) == 1 and FutureJob.objects.exists()  # asked, and not met by the new met
    call_command("migrate", verbosity=0)
    assert commit_notices.missing() == [] and check_save_triggers(databases=["default"]) == []
    with CaptureQueriesContext(connection) as seen:
        thing.status = "packed"
        thing.save()
    assert judged(seen) == 0
    thing.status = "delivered"
    thing.save()
    assert JobHistory.objects.get(entity_key=str(thing.pk)).outcome == Outcome.MET


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_sync__takes_the_trigger_from_a_table_no_longer_watched_and_drops_unused_functions(declare):
    declare()
    assert TABLE in triggers()
    expectations.unregister("test.expect")
    given, taken = commit_notices.sync()
    assert (given, TABLE in taken) == ([], True) and TABLE not in triggers()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE %s", [watch_triggers.TRIGGER + r"\_v%"])
        assert cursor.fetchone()[0] == 0
    assert commit_notices.sync() == ([], [])  # nothing left to do


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_save_notices_off__no_trigger_and_every_save_asks(declare, make_thing, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "SAVE_NOTICES": False}
    declare()
    assert TABLE not in triggers()
    thing = make_thing()
    with CaptureQueriesContext(connection) as seen:
        thing.save()
    assert judged(seen) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_transactions_managed_by_hand__the_save_is_judged_in_its_transaction(declare, make_thing):
    declare()
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    transaction.set_autocommit(False)
    try:
        thing.status = "shipped"
        thing.save()  # no trigger has spoken yet: asked now
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert JobHistory.objects.get(entity_key=str(thing.pk)).outcome == Outcome.MET


@pytest.mark.django_db
def test_in_a_test_case_transaction__captured_commit_callbacks_judge_by_asking(
    declare, make_thing, django_capture_on_commit_callbacks
):
    """A host's TestCase never commits: its captureOnCommitCallbacks(execute=True) runs the
    judgement of the saves made inside it (the row was saved before it too: that save's
    callback is not the one run), which asks (no trigger spoke) and sees the test's own writes;
    a second block judges again."""
    declare()
    if connection.vendor == "postgresql":
        assert TABLE in triggers()  # installed in the test's transaction, rolled back with it
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    thing.save()
    with django_capture_on_commit_callbacks(execute=True):
        thing.status = "packed"
        thing.save()
    assert FutureJob.objects.filter(entity_key=str(thing.pk)).exists()
    with django_capture_on_commit_callbacks(execute=True):
        thing.status = "shipped"
        thing.save()
    assert JobHistory.objects.get(entity_key=str(thing.pk)).outcome == Outcome.MET


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_other_models_and_new_rows_are_never_judged(declare, make_thing):
    declare()
    with CaptureQueriesContext(connection) as seen:
        make_thing()
        Other.objects.create().save()
    assert judged(seen) == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_bulk_update_names_only_the_met_rows_and_a_later_save_of_another_asks_nothing(declare, make_thing):
    """``QuerySet.update()`` sends no signal: the rows it named are nobody's to judge (they wait
    for their rung or recheck()); they are forgotten at the next save's settling, so they never
    cost that save a judgement."""
    declare()
    things = [make_thing() for _ in range(5)]
    for thing in things:
        prescient.expect(thing, "test.expect", now=T0)
    Thing.objects.filter(pk__in=[t.pk for t in things[:3]]).update(status="shipped")
    heard = commit_notices._heard[connection.connection]
    assert heard.keys == {f"{TABLE}:{t.pk}" for t in things[:3]}  # named by one statement's trigger
    with CaptureQueriesContext(connection) as seen:
        things[4].save()
    assert judged(seen) == 0 and heard.keys == set()
    assert FutureJob.objects.count() == 5  # update() ends nothing at once
    assert prescient.recheck(Thing.objects.all()) == 3
