"""Recurring schedules: each rule of issue #13, time passed in as ``now`` (no sleeps)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import django
import pytest
from django.db import IntegrityError, transaction

import prescient
from prescient import recurrence
from prescient.engine import recurring
from prescient.engine.store import schedules as writer
from prescient.exceptions import InvalidSchedule
from prescient.maintenance.recurring import Declarations
from prescient.models import FutureJob, JobHistory, Occurrence, Schedule
from tests.testapp.models import Other, RunLog, Thing

pytestmark = pytest.mark.django_db

T = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)  # a Monday, on a slot boundary


def runs(thing: Thing) -> int:
    return RunLog.objects.filter(check_name="test.record", entity_key=str(thing.pk)).count()


def hourly(thing: Thing, name: str = "h", **options):
    return prescient.recurring(name, check="test.record", entity=thing, every=timedelta(hours=1), now=T, **options)


# --- rule 1: occurrences ---------------------------------------------------------------------


def test_recurring__first_occurrence_strictly_after_now_and_due_on_a_slot():
    thing = Thing.objects.create()
    schedule = prescient.recurring(
        "r", check="test.record", entity=thing, cron="7 9 * * *", timezone="Europe/Berlin", now=T
    )
    assert schedule.next_at == datetime(2026, 1, 5, 8, 7, tzinfo=UTC)
    assert schedule.due_at == datetime(2026, 1, 5, 8, 15, tzinfo=UTC)
    on_the_dot = hourly(thing, "on-the-dot")
    assert on_the_dot.next_at == T + timedelta(hours=1)


def test_recurring__the_same_name_updates_it():
    thing = Thing.objects.create()
    hourly(thing)
    again = prescient.recurring("h", check="test.record", entity=thing, cron="0 12 * * *", now=T)
    assert Schedule.objects.count() == 1
    assert (again.cron, again.every_seconds, again.next_at) == ("0 12 * * *", None, T + timedelta(hours=12))


# --- rules 2 and 3: a job per occurrence, produced and run by the same tick -------------------


def test_tick__produces_then_runs_each_occurrence_once():
    thing = Thing.objects.create()
    hourly(thing)
    assert prescient.tick(T + timedelta(minutes=30)).processed == 0
    summary = prescient.tick(T + timedelta(hours=1))
    assert summary.processed == 1 and runs(thing) == 1
    assert prescient.tick(T + timedelta(hours=1, minutes=5)).processed == 0
    prescient.tick(T + timedelta(hours=2))
    schedule = Schedule.objects.get()
    assert runs(thing) == 2 and schedule.runs == 2 and schedule.missed == schedule.skipped == 0
    assert schedule.last_run_at == T + timedelta(hours=2)
    assert JobHistory.objects.filter(job_exec="test.record", entity_key=str(thing.pk)).count() == 2
    assert Occurrence.objects.count() == 2


def test_overlap__a_pending_job_skips_the_occurrence():
    thing = Thing.objects.create(status="again")  # re-checks in an hour: its job stays pending
    hourly(thing)
    prescient.tick(T + timedelta(hours=1))
    assert FutureJob.objects.count() == 1
    recurring.produce(T + timedelta(hours=2))  # its re-check is also due at 02:00, not yet run
    schedule = Schedule.objects.get()
    assert (schedule.runs, schedule.skipped) == (1, 1)
    assert FutureJob.objects.count() == 1
    assert list(Occurrence.objects.values_list("outcome", flat=True)) == ["skipped", "ran"]


def test_workflow__occurrences_join_it_and_start_paused_when_it_is():
    thing = Thing.objects.create()
    hourly(thing, workflow="billing")
    from prescient.engine import store

    with transaction.atomic():
        store.lock_workflow("billing", for_update=True)
        store.pause_workflow("billing", T)
    recurring.produce(T + timedelta(hours=1))
    job = FutureJob.objects.get()
    assert (job.workflow, job.state) == ("billing", "paused")


# --- rule 4: missed occurrences ----------------------------------------------------------------


@pytest.mark.parametrize(("catch_up", "ran", "missed"), [("latest", 1, 2), ("skip", 0, 3)])
def test_catch_up__after_three_missed_occurrences(catch_up, ran, missed):
    thing = Thing.objects.create()
    hourly(thing, catch_up=catch_up)  # 01:00, 02:00, 03:00 pass with nothing running
    prescient.tick(T + timedelta(hours=3, minutes=50))
    schedule = Schedule.objects.get()
    assert (runs(thing), schedule.runs, schedule.missed) == (ran, ran, missed)
    assert schedule.next_at == T + timedelta(hours=4)
    if ran:
        assert JobHistory.objects.get().first_check_at == T + timedelta(hours=3)  # the newest


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks")
def test_catch_up_all__runs_each_missed_task_occurrence_oldest_first():
    from tests.tasksapp.tasks import add

    prescient.recurring("adds", task=add, args=[2, 3], every=timedelta(hours=1), catch_up="all", now=T)
    recurring.produce(T + timedelta(hours=3, minutes=50))
    jobs = list(FutureJob.objects.order_by("id"))
    assert [job.next_check_at for job in jobs] == [T + timedelta(hours=h) for h in (1, 2, 3)]
    assert all(job.payload["args"] == [2, 3] for job in jobs)
    assert len({job.entity_key for job in jobs}) == 3
    schedule = Schedule.objects.get()
    assert (schedule.runs, schedule.missed) == (3, 0)


def test_catch_up_all__is_refused_for_a_check():
    with pytest.raises(InvalidSchedule, match="catch_up='all' is for task schedules"):
        hourly(Thing.objects.create(), catch_up="all")
    assert not Schedule.objects.exists()


# --- pause, resume, run now, stop ----------------------------------------------------------------


def test_paused__produces_nothing_and_misses_nothing_until_resumed():
    thing = Thing.objects.create()
    hourly(thing)
    recurring.pause("h", now=T)
    prescient.tick(T + timedelta(hours=5))
    assert runs(thing) == 0 and Schedule.objects.get().missed == 0
    recurring.resume("h", now=T + timedelta(hours=5, minutes=10))
    prescient.tick(T + timedelta(hours=6))
    schedule = Schedule.objects.get()
    assert (runs(thing), schedule.runs, schedule.missed) == (1, 1, 0)


def test_run_next_now__runs_the_next_occurrence_at_the_next_pass():
    thing = Thing.objects.create()
    hourly(thing)
    recurring.run_next_now("h", now=T + timedelta(minutes=3))
    prescient.tick(T + timedelta(minutes=3))
    assert runs(thing) == 1
    assert Schedule.objects.get().next_at == T + timedelta(hours=2)


def test_stop_recurring__removes_it_and_nothing_more_runs():
    thing = Thing.objects.create()
    hourly(thing)
    assert prescient.stop_recurring("h") is True
    assert prescient.stop_recurring("h") is False
    prescient.tick(T + timedelta(hours=3))
    assert runs(thing) == 0


# --- rule 3: a database constraint, not a lock ---------------------------------------------------


def test_an_occurrence_is_produced_once__a_second_write_is_refused():
    thing = Thing.objects.create()
    hourly(thing)
    stale = Schedule.objects.get()  # as a second process read it
    now = T + timedelta(hours=1)
    recurring.produce(now)
    plan = recurring.plan(stale, now, 15)
    with pytest.raises((writer.ProducedElsewhere, IntegrityError)), transaction.atomic():
        writer.produce([plan], now)
    with pytest.raises(IntegrityError), transaction.atomic():  # the constraint itself
        Occurrence.objects.create(schedule=stale, at=now, outcome="ran", produced_at=now)
    assert FutureJob.objects.count() == 1 and Schedule.objects.get().runs == 1


# --- rule 6: bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({"cron": "0 9 * * XYZ"}, "invalid day of week field 'XYZ'"),
    ({"cron": "0 9 * * *", "timezone": "Europe/Atlantis"}, "Unknown time zone"),
    ({"cron": "0 9 * * *", "every": timedelta(hours=1)}, "either cron or every"),
    ({}, "either cron or every"),
    ({"every": timedelta(minutes=5)}, "under one slot"),
    ({"cron": "0 9 * * *", "catch_up": "sometimes"}, "catch_up must be one of"),
])
def test_recurring__bad_input_writes_nothing(options, message):
    thing = Thing.objects.create()
    with pytest.raises(InvalidSchedule, match=message):
        prescient.recurring("bad", check="test.record", entity=thing, now=T, **options)
    assert not Schedule.objects.exists()


def test_recurring__bad_targets_write_nothing():
    thing = Thing.objects.create()
    with pytest.raises(InvalidSchedule, match="either check"):
        prescient.recurring("bad", cron="0 9 * * *", now=T)
    with pytest.raises(InvalidSchedule, match="is about testapp.thing"):
        prescient.recurring("bad", check="test.record", entity=Other.objects.create(), cron="0 9 * * *", now=T)
    with pytest.raises(InvalidSchedule, match="Unknown check"):
        prescient.recurring("bad", check="no.such", entity=thing, cron="0 9 * * *", now=T)
    assert not Schedule.objects.exists()


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks")
def test_recurring__a_task_of_another_backend_is_refused(monkeypatch):
    from tests.tasksapp.tasks import add

    class Elsewhere:
        is_prescient = False

    foreign = add.using()
    monkeypatch.setattr(type(foreign), "get_backend", lambda self: Elsewhere())
    with pytest.raises(InvalidSchedule, match="not a prescient backend"):
        prescient.recurring("bad", task=foreign, cron="0 9 * * *", now=T)
    with pytest.raises(InvalidSchedule, match="must be a django.tasks Task"):
        prescient.recurring("bad", task=print, cron="0 9 * * *", now=T)
    assert not Schedule.objects.exists()


# --- code-declared schedules -------------------------------------------------------------------


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks")
def test_periodic__appears_changes_and_disappears_with_its_declaration():
    from tests.tasksapp.tasks import add

    try:
        prescient.periodic(cron="0 2 * * *", timezone="Europe/Berlin", args=[1, 2])(add)
        service = Declarations()
        assert service.is_due(survey=None)  # type: ignore[arg-type]
        service.run_once(T)
        schedule = Schedule.objects.get(name=add.module_path)
        assert schedule.declared and schedule.next_at == datetime(2026, 1, 5, 1, 0, tzinfo=UTC)  # 02:00 CET
        assert recurring.sync_declared(T + timedelta(minutes=1)) == 0  # unchanged: left alone
        prescient.periodic(cron="0 3 * * *", timezone="Europe/Berlin", args=[1, 2])(add)
        assert service.is_due(survey=None)  # type: ignore[arg-type]
        service.run_once(T)
        assert Schedule.objects.get(name=add.module_path).cron == "0 3 * * *"
        recurrence.forget(add.module_path)
        assert recurring.sync_declared(T) == 1
        assert not Schedule.objects.exists()
    finally:
        recurrence.forget(add.module_path)


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks")
def test_periodic__a_bad_declaration_fails_at_import():
    from tests.tasksapp.tasks import add

    with pytest.raises(InvalidSchedule, match="invalid hour field"):
        prescient.periodic(cron="0 24 * * *")(add)
    assert recurrence.declared() == {}


def test_prescient_schedules_command__lists_the_next_occurrence():
    from io import StringIO

    from django.core.management import call_command

    thing = Thing.objects.create()
    prescient.recurring("weekly", check="test.record", entity=thing, cron="0 9 * * MON",
                        timezone="America/New_York", now=T)
    out = StringIO()
    call_command("prescient_schedules", stdout=out)
    assert "weekly: test.record testapp.thing:" in out.getvalue()
    assert "every Monday at 09:00, America/New_York · next 2026-01-05T14:00:00+00:00" in out.getvalue()


def test_admin_schedules_page__shows_the_next_occurrences_and_pauses(admin_client):
    thing = Thing.objects.create()
    schedule = prescient.recurring("weekly", check="test.record", entity=thing, cron="0 9 * * MON",
                                   timezone="America/New_York", now=T)
    page = admin_client.get(f"/admin/prescient/schedule/{schedule.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "every Monday at 09:00, America/New_York" in text
    assert "2026-01-05 14:00 UTC · 2026-01-05 09:00 America/New_York" in text
    assert admin_client.get("/admin/prescient/schedule/").status_code == 200
    admin_client.post("/admin/prescient/schedule/", {"action": "pause_schedules", "_selected_action": [schedule.pk]})
    assert Schedule.objects.get().is_paused


def test_admin_schedules_actions__need_the_change_permission(client):
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer", password="not-used", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(content_type__app_label="prescient",
                                                          codename__startswith="view_"))
    client.force_login(viewer)
    schedule = prescient.recurring("weekly", check="test.record", entity=Thing.objects.create(),
                                   cron="0 9 * * MON", now=T)
    page = client.get("/admin/prescient/schedule/")
    assert page.status_code == 200 and "pause_schedules" not in page.content.decode()
    for action in ("pause_schedules", "resume_schedules", "run_next_now"):
        client.post("/admin/prescient/schedule/", {"action": action, "_selected_action": [schedule.pk]})
    after = Schedule.objects.get()
    assert not after.is_paused and after.next_at == schedule.next_at, "a view-only user steered a schedule"
