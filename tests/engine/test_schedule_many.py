"""Bulk scheduling: prescient.schedule_many and the prescient_backfill command."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

import prescient
from prescient.engine import verbs as services
from prescient.exceptions import InvalidEntity, InvalidTime, UnknownCheck
from prescient.models import FutureJob, Workflow
from prescient.states import State
from tests.conftest import manage
from tests.testapp.models import Other, Thing

pytestmark = pytest.mark.django_db


def things(count: int, **fields) -> list[Thing]:
    return Thing.objects.bulk_create([Thing(**fields) for _ in range(count)])


def keys_of(check: str = "test.record") -> set[str]:
    return set(FutureJob.objects.filter(job_exec=check).values_list("entity_key", flat=True))


# --- schedule_many -----------------------------------------------------------------------------


def test_schedule_many__a_queryset_gets_one_job_per_row_due_like_schedule(t0):
    rows = things(5)
    created = prescient.schedule_many(Thing.objects.all(), "test.record", delay=timedelta(hours=3, minutes=5), now=t0)
    assert created == 5
    assert keys_of() == {str(t.pk) for t in rows}
    job = FutureJob.objects.first()
    one = prescient.schedule(Thing.objects.create(), "test.record", delay=timedelta(hours=3, minutes=5), now=t0)
    assert job.first_check_at == job.next_check_at == one.next_check_at == t0 + timedelta(hours=3, minutes=15)
    assert (job.state, job.last_state, job.entity_name, job.created_at) == (State.SCHEDULED, "", "testapp.thing", t0)


def test_schedule_many__skips_entities_with_a_pending_job_and_counts_only_new_ones(t0):
    rows = things(4)
    kept = prescient.schedule(rows[0], "test.record", delay=timedelta(hours=1), now=t0)
    created = prescient.schedule_many(Thing.objects.all(), "test.record", delay=timedelta(hours=5), now=t0)
    assert created == 3
    assert FutureJob.objects.count() == 4
    kept_now = FutureJob.objects.get(pk=kept.pk)
    assert kept_now.next_check_at == t0 + timedelta(hours=1), "an existing job is left unchanged"
    assert prescient.schedule_many(Thing.objects.all(), "test.record", now=t0) == 0


def test_schedule_many__instances_and_duplicates(t0):
    rows = things(3)
    assert prescient.schedule_many(
        [rows[0], rows[1], rows[0]], "test.record", at=t0 + timedelta(minutes=1), now=t0
    ) == 2
    assert keys_of() == {str(rows[0].pk), str(rows[1].pk)}
    assert FutureJob.objects.get(entity_key=str(rows[0].pk)).next_check_at == t0 + timedelta(minutes=15)


def test_schedule_many__batches_and_reports_progress(t0, django_assert_max_num_queries):
    things(25)
    seen = []
    with django_assert_max_num_queries(3 * 4):  # per batch: its keys, a transaction, the insert
        created = prescient.schedule_many(
            Thing.objects.filter(status="open"), "test.record", delay=timedelta(hours=1), now=t0, batch_size=10,
            progress=lambda done, made: seen.append((done, made)),
        )
    assert created == 25
    assert seen == [(10, 10), (20, 20), (25, 25)]


def test_schedule_many__a_sliced_queryset_and_an_empty_one(t0):
    things(5)
    assert prescient.schedule_many(Thing.objects.order_by("pk")[:2], "test.record", now=t0) == 2
    assert prescient.schedule_many(Thing.objects.none(), "test.record", now=t0) == 0
    assert prescient.schedule_many([], "test.record", now=t0) == 0


def test_schedule_many__into_a_paused_workflow_starts_paused(t0):
    things(2)
    prescient.pause(workflow="returns", create_workflow=True, now=t0)
    assert prescient.schedule_many(Thing.objects.all(), "test.record", workflow="returns", now=t0) == 2
    assert set(FutureJob.objects.values_list("state", "last_state", "workflow")) == {
        (State.PAUSED, State.SCHEDULED, "returns")
    }
    prescient.schedule_many(Thing.objects.none(), "test.record", workflow="new", now=t0)
    assert not Workflow.objects.filter(name="new").exists(), "no batch, no workflow row"


@pytest.mark.postgres
def test_schedule_many__notifies_only_when_something_is_due_now(t0):
    """The wake-up rides in the batch's INSERT, sent for rows written (PostgreSQL; elsewhere
    workers poll): a statement with pg_notify that returned rows is one wake-up."""
    calls = []

    def record(execute, sql, params, many, context):
        written = execute(sql, params, many, context)
        if "pg_notify" in sql and context["cursor"].rowcount > 0:
            calls.append(1)
        return written

    things(3)
    with connection.execute_wrapper(record):
        prescient.schedule_many(Thing.objects.all(), "test.record", delay=timedelta(hours=1), now=t0)
        assert calls == []
        prescient.schedule_many(Thing.objects.all(), "test.record", now=t0)  # nothing new
        assert calls == []
        prescient.schedule_many([Thing.objects.create()], "test.record", now=t0)
        assert calls == [1]


@pytest.mark.postgres
def test_schedule_many__sends_notify_on_commit_when_due_now(transactional_db, t0):
    import psycopg

    settings = connection.settings_dict
    listener = psycopg.connect(
        dbname=settings["NAME"], user=settings.get("USER") or None, host=settings.get("HOST") or None,
        port=settings.get("PORT") or None, autocommit=True,
    )
    try:
        listener.execute("LISTEN prescient_due")
        things(2)
        prescient.schedule_many(Thing.objects.all(), "test.record", at=timezone.now() - timedelta(minutes=20))
        received = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.channel for n in received] == ["prescient_due"]
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("entities", "check", "kwargs", "error", "match"),
    [
        (lambda: Thing.objects.all(), "test.nope", {}, UnknownCheck, "Unknown check 'test.nope'"),
        (
            lambda: Other.objects.all(), "test.record", {}, InvalidEntity,
            "about testapp.thing, got a queryset of testapp.other",
        ),
        (
            lambda: [*Thing.objects.all(), Other.objects.create()], "test.record", {}, InvalidEntity,
            "got an instance of testapp.other",
        ),
        (lambda: [*Thing.objects.all(), Thing()], "test.record", {}, InvalidEntity, "not saved"),
        (lambda: Thing.objects.all(), "test.record", {"at": "naive"}, InvalidTime, "naive"),
        (
            lambda: Thing.objects.all(), "test.record", {"at": "t0", "delay": timedelta(1)}, InvalidTime,
            "either at or delay",
        ),
        (lambda: Thing.objects.all(), "test.record", {"delay": timedelta(days=31)}, InvalidTime, "beyond the horizon"),
        (lambda: Thing.objects.all(), "test.record", {"delay": timedelta(hours=-1)}, ValueError, "not be negative"),
    ],
)
def test_schedule_many__bad_input_raises_and_writes_nothing(t0, entities, check, kwargs, error, match):
    things(3)
    kwargs = {k: (t0.replace(tzinfo=None) if v == "naive" else t0 if v == "t0" else v) for k, v in kwargs.items()}
    with pytest.raises(error, match=match):
        prescient.schedule_many(entities(), check, now=t0, **kwargs)
    assert not FutureJob.objects.exists()


def test_schedule_many__is_exported_lazily_like_schedule():
    assert "schedule_many" in prescient.__all__
    assert prescient.schedule_many is services.schedule_many


# --- prescient_backfill ------------------------------------------------------------------------


def backfill(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("prescient_backfill", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_backfill__schedules_matching_rows_with_a_progress_bar():
    open_ones = things(3, status="open")
    things(2, status="shipped")
    before = timezone.now()
    out, err = backfill("testapp.Thing", "test.record", "--filter", "status=open", "--delay-seconds", "3600",
                        "--batch-size", "2")
    assert out == "prescient backfill: matched=3 scheduled=3 already_pending=0 check=test.record\n"
    assert "3/3 (100%)" in err
    assert keys_of() == {str(t.pk) for t in open_ones}
    due = FutureJob.objects.first().next_check_at
    assert before + timedelta(hours=1) <= due <= before + timedelta(hours=1, minutes=15)


def test_backfill__again_keeps_pending_jobs_and_says_so():
    things(2)
    backfill("testapp.thing", "test.record", "--workflow", "w1", "--create")
    out, _ = backfill("testapp.thing", "test.record")
    assert out == "prescient backfill: matched=2 scheduled=0 already_pending=2 check=test.record\n"
    assert set(FutureJob.objects.values_list("workflow", flat=True)) == {"w1"}


def test_backfill__at_and_several_filters():
    rows = things(2, name="a", status="open")
    things(1, name="a", status="late")
    things(1, name="b", status="open")
    at = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    backfill("testapp.Thing", "test.record", "--filter", "name=a", "--filter", "status=open", "--at", at.isoformat(),
             "-v", "0")
    assert keys_of() == {str(t.pk) for t in rows}
    assert {j.next_check_at >= at for j in FutureJob.objects.all()} == {True}


def test_backfill__filter_by_primary_key_and_contradicting_filters():
    rows = things(3)
    backfill("testapp.Thing", "test.record", "--filter", f"id={rows[1].pk}")
    assert keys_of() == {str(rows[1].pk)}
    out, _ = backfill("testapp.Thing", "test.record", "--filter", "status=open", "--filter", "status=late")
    assert "matched=0" in out


def test_backfill__dry_run_counts_and_writes_nothing():
    rows = things(3)
    prescient.schedule(rows[0], "test.record", delay=timedelta(hours=1))
    out, err = backfill("testapp.Thing", "test.record", "--dry-run")
    assert out == "prescient backfill (dry run): matched=3 would_schedule=2 already_pending=1 check=test.record\n"
    assert err == ""
    assert FutureJob.objects.count() == 1


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (
            ["testapp.Thing", "test.record", "--filter", "colour=red"],
            "testapp.Thing has no field 'colour'.*name, status",
        ),
        (["testapp.Thing", "test.record", "--filter", "id=abc"], "--filter id=abc:"),
        (["testapp.Thing", "test.record", "--filter", "nonsense"], "is not field=value"),
        (["testapp.Other", "test.record"], "about testapp.thing, not testapp.Other"),
        (["auth.User", "test.record"], "about testapp.thing, not auth.User"),
        (["testapp.Thing", "test.nope"], "Unknown check 'test.nope'"),
        (["testapp.Thing", "test.record", "--at", "2026-11-23T10:00:00"], "has no UTC offset"),
        (["testapp.Thing", "test.record", "--at", "2026-11-23T10:00:00Z", "--delay-seconds", "5"], "not allowed with"),
        (["testapp.Thing", "test.record", "--delay-seconds", "-5"], "whole number of seconds"),
        (["testapp.Thing", "test.record", "--delay-seconds", str(60 * 86400)], "beyond the horizon"),
    ],
)
def test_backfill__bad_input_is_a_command_error_and_writes_nothing(args, match):
    things(2)
    with pytest.raises(CommandError, match=match):
        backfill(*args)
    assert not FutureJob.objects.exists()


def test_backfill__a_check_without_a_model_cannot_be_backfilled(register):
    register("test.modelless", lambda entity, job: None, model=None)
    with pytest.raises(CommandError, match="names no model"):
        backfill("testapp.Thing", "test.modelless")


def test_backfill__runs_as_a_real_command(transactional_db):
    rows = things(3)
    proc = manage("prescient_backfill", "testapp.Thing", "test.record", "--delay-seconds", "60")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "prescient backfill: matched=3 scheduled=3 already_pending=0 check=test.record\n"
    assert "3/3 (100%)" in err
    assert keys_of() == {str(t.pk) for t in rows}
