"""The tick: runs (rule 3), what checks return (4), failures and timeouts (5), history (6),
catch-up and cost (8)."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

import prescient
from prescient.models import FutureJob, JobHistory
from prescient.states import State
from tests.conftest import on_postgres
from tests.testapp.models import RunLog, Thing

pytestmark = pytest.mark.django_db

SLOT = timedelta(minutes=15)


@pytest.fixture
def calls():
    return []


@pytest.fixture
def returning(register, calls):
    """Register check ``test.ret`` returning ``value`` (a callable of (thing, job) or a value)."""

    def make(value, **options):
        def check(thing, job):
            calls.append((thing.pk, job.pk))
            return value(thing, job) if callable(value) else value

        register("test.ret", check, **options)
        return "test.ret"

    return make


def job_for(thing, check="test.ret", now=None, **kw):
    return prescient.schedule(thing, check, now=now, **kw)


# --- rule 3: a run --------------------------------------------------------------------------


def test_run__gets_a_fresh_instance_and_the_job(make_thing, returning, t0, calls):
    seen = []
    returning(lambda thing, job: seen.append((thing.status, job.job_exec)))
    thing = make_thing(status="open")
    job_for(thing, now=t0)
    Thing.objects.filter(pk=thing.pk).update(status="changed")
    prescient.tick(t0)
    assert seen == [("changed", "test.ret")]


def test_deleted_entity__ends_entity_missing_without_calling(make_thing, returning, t0, calls):
    returning(None)
    thing = make_thing()
    job_for(thing, now=t0)
    thing.delete()
    summary = prescient.tick(t0)
    assert calls == []
    assert summary.counts["entity_missing"] == 1
    row = JobHistory.objects.get()
    assert (row.outcome, row.run_count) == ("entity_missing", 0)
    assert not FutureJob.objects.exists()


def test_unparsable_key__is_a_missing_entity_and_other_jobs_still_run(make_thing, make_job, returning, t0, calls):
    returning(None)
    good = make_thing()
    make_job("test.ret", thing=good, next_check_at=t0)
    broken = make_job("test.ret", next_check_at=t0)
    FutureJob.objects.filter(pk=broken.pk).update(entity_key="not-a-number")
    prescient.tick(t0)
    assert calls == [(good.pk, calls[0][1])]
    assert sorted(JobHistory.objects.values_list("outcome", flat=True)) == ["completed", "entity_missing"]


# --- rule 4: what the check returns -----------------------------------------------------------


def test_none__completes(make_thing, returning, t0):
    returning(None)
    job_for(make_thing(), now=t0)
    assert prescient.tick(t0).counts["completed"] == 1
    assert JobHistory.objects.get().outcome == "completed"
    assert not FutureJob.objects.exists()


def test_timedelta__reschedules_to_the_slot_after(make_thing, returning, t0):
    returning(timedelta(hours=3, minutes=1))
    job = job_for(make_thing(), now=t0)
    summary = prescient.tick(t0 + timedelta(minutes=2))
    assert summary.counts["rescheduled"] == 1
    job.refresh_from_db()
    assert job.state == State.SCHEDULED
    assert job.check_count == 1
    assert job.run_count == 1
    assert job.next_check_at == t0 + timedelta(hours=3, minutes=15)
    assert job.first_check_at == t0
    assert job.reserved_by == ""


def test_aware_datetime__reschedules(make_thing, returning, t0):
    returning(datetime(2026, 11, 22, 12, 0, 1, tzinfo=UTC))
    job = job_for(make_thing(), now=t0)
    prescient.tick(t0)
    job.refresh_from_db()
    assert job.next_check_at == datetime(2026, 11, 22, 12, 15, tzinfo=UTC)


def test_zero_delay__is_the_next_slot_strictly_after_now(make_thing, returning, t0):
    returning(timedelta(0))
    job = job_for(make_thing(), now=t0)
    prescient.tick(t0)
    job.refresh_from_db()
    assert job.next_check_at == t0 + SLOT


def test_past_time__ends_horizon(make_thing, returning, t0):
    returning(timedelta(seconds=-1))
    job_for(make_thing(), now=t0)
    assert prescient.tick(t0).counts["horizon"] == 1
    assert JobHistory.objects.get().outcome == "horizon"


def test_beyond_horizon__ends_horizon_and_per_check_override(make_thing, returning, t0):
    returning(timedelta(days=2, seconds=1), horizon_days=2)
    job_for(make_thing(), now=t0)
    prescient.tick(t0)
    assert JobHistory.objects.get().outcome == "horizon"


def test_exactly_at_horizon__is_still_allowed(make_thing, returning, t0):
    returning(timedelta(days=2), horizon_days=2)
    job_for(make_thing(), now=t0)
    prescient.tick(t0)
    assert FutureJob.objects.get().check_count == 1


def test_max_checks__the_run_that_would_exceed_ends_the_job(make_thing, returning, t0):
    returning(timedelta(minutes=1), max_checks=2)
    job_for(make_thing(), now=t0)
    now = t0
    for expected in (1, 2):
        prescient.tick(now)
        job = FutureJob.objects.get()
        assert job.check_count == expected
        now = job.next_check_at
    summary = prescient.tick(now)
    assert summary.counts["max_checks"] == 1
    row = JobHistory.objects.get()
    assert (row.outcome, row.check_count, row.run_count) == ("max_checks", 2, 3)
    assert not FutureJob.objects.exists()


def test_max_checks_default_is_the_setting(make_thing, returning, t0, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "MAX_CHECKS": 1}
    returning(timedelta(minutes=1))
    job_for(make_thing(), now=t0)
    prescient.tick(t0)
    prescient.tick(t0 + SLOT)
    assert JobHistory.objects.get().outcome == "max_checks"


@pytest.mark.parametrize(
    ("value", "named"),
    [("tomorrow", "str"), (42, "int"), (datetime(2026, 11, 22, 12, 0), "naive datetime"), ([1], "list")],
)
def test_garbage__is_a_failed_run_naming_check_and_type(make_thing, returning, t0, value, named):
    returning(value)
    job_for(make_thing(), now=t0)
    summary = prescient.tick(t0)
    assert summary.counts["retried"] == 1
    job = FutureJob.objects.get()
    assert "'test.ret'" in job.last_error
    assert named in job.last_error
    assert job.failure_count == 1
    assert job.next_check_at == t0 + SLOT
    assert job.state == State.SCHEDULED


# --- rule 5: failures and timeouts ------------------------------------------------------------


def test_exception__is_recorded_retried_next_slot_then_fails(make_thing, register, t0, caplog):
    def boom(thing, job):
        raise RuntimeError("backend down")

    register("test.boom", boom, max_retries=2)
    thing = make_thing()
    job_for(thing, "test.boom", now=t0)
    now = t0
    for failures in (1, 2, 3):
        prescient.tick(now)
        if failures <= 2:
            job = FutureJob.objects.get()
            assert job.failure_count == failures
            assert job.last_error == "RuntimeError: backend down"
            assert job.next_check_at == now + SLOT
            now = job.next_check_at
    row = JobHistory.objects.get()
    assert (row.outcome, row.failure_count, row.run_count) == ("failed", 3, 3)
    assert row.last_error == "RuntimeError: backend down"
    assert not FutureJob.objects.exists()
    assert "Traceback" in caplog.text and "backend down" in caplog.text


def test_a_retry_due_at_once__waits_for_the_next_tick_while_the_others_run(make_thing, register, t0):
    """An error handler that retries at ``now`` must not keep one tick running the job forever."""
    from tests.testapp.handlers import retry_now

    runs: list[int] = []

    def boom(thing, job):
        runs.append(job.pk)
        raise RuntimeError("backend down")

    register("test.boom", boom, error_handler=retry_now)
    register("test.fine", lambda thing, job: None)
    failing = job_for(make_thing(), "test.boom", now=t0)
    others = [job_for(make_thing(), "test.fine", now=t0) for _ in range(3)]
    summary = prescient.tick(t0, batch_size=2)
    assert runs == [failing.pk]  # once, though due again at t0 after each failure
    assert not FutureJob.objects.filter(pk__in=[job.pk for job in others]).exists()  # all ran
    job = FutureJob.objects.get()
    assert (job.pk, job.state, job.failure_count, job.next_check_at) == (failing.pk, State.SCHEDULED, 1, t0)
    assert summary.counts["completed"] == 3
    prescient.tick(t0)  # the next tick runs it again, once
    assert runs == [failing.pk] * 2


def test_recent_errors__kept_with_time(make_thing, register, t0):
    register("test.boom", lambda thing, job: 1 / 0)
    job_for(make_thing(), "test.boom", now=t0)
    prescient.tick(t0)
    job = FutureJob.objects.get()
    # Each entry also names its exception's class and the run it ended (1: the first run).
    assert job.recent_errors == [{"at": t0.isoformat(), "error": "ZeroDivisionError: division by zero",
                                  "exception_class_path": "builtins.ZeroDivisionError", "run": 1}]


@pytest.mark.slow
@pytest.mark.parametrize("check", ["test.sleep_forever", "test.spin"])
def test_timeout__stops_a_sleeping_or_spinning_check_and_goes_on(make_thing, register, t0, check, calls):
    register("test.after", lambda thing, job: calls.append(thing.pk))
    stuck, other = make_thing(), make_thing()
    job_for(stuck, check, now=t0)
    job_for(other, "test.after", now=t0)  # due in the same slot, claimed after the stuck one
    started = time.monotonic()
    summary = prescient.tick(t0)
    elapsed = time.monotonic() - started
    assert elapsed < 2 + 5, "stopped within a few seconds of the 2 s limit"
    assert calls == [other.pk]
    assert summary.counts["completed"] == 1 and summary.counts["retried"] == 1
    job = FutureJob.objects.get(job_exec=check)
    assert job.last_error.startswith("CheckTimeout:")
    assert "timeout of 2s" in job.last_error
    assert job.failure_count == 1
    assert job.state == State.SCHEDULED
    # The database connection is still usable after the interruption.
    assert Thing.objects.count() == 2


def test_timeout_override_per_check(make_thing, register, t0):
    def nap(thing, job):
        time.sleep(5)

    register("test.nap", nap, timeout_seconds=0.2)
    job_for(make_thing(), "test.nap", now=t0)
    prescient.tick(t0)
    assert "timeout of 0.2s" in FutureJob.objects.get().last_error


def test_check_swallowing_exceptions_cannot_swallow_the_timeout(make_thing, register, t0):
    def stubborn(thing, job):
        while True:
            try:
                time.sleep(5)
            except Exception:
                pass

    register("test.stubborn", stubborn, timeout_seconds=0.2)
    job_for(make_thing(), "test.stubborn", now=t0)
    prescient.tick(t0)
    assert FutureJob.objects.get().last_error.startswith("CheckTimeout:")


def test_unregistered_check_in_the_table__fails_and_retries(make_job, t0):
    make_job("gone.check", next_check_at=t0)
    prescient.tick(t0)
    job = FutureJob.objects.get()
    assert "UnknownCheck" in job.last_error and "gone.check" in job.last_error
    assert job.failure_count == 1


# --- rule 6: history ----------------------------------------------------------------------------


def test_history__one_row_with_counts_and_timings(make_thing, returning, t0):
    answers = iter([timedelta(minutes=1), None])
    returning(lambda thing, job: next(answers))
    thing = make_thing()
    job = job_for(thing, now=t0, workflow="orders")
    prescient.tick(t0)
    prescient.tick(t0 + SLOT)
    row = JobHistory.objects.get()
    assert row.job_id == job.pk
    assert (row.entity_name, row.entity_key, row.job_exec, row.workflow) == (
        "testapp.thing", str(thing.pk), "test.ret", "orders"
    )
    assert (row.outcome, row.check_count, row.run_count, row.failure_count) == ("completed", 1, 2, 0)
    assert row.first_check_at == t0
    assert row.finished_at == t0 + SLOT
    assert row.total_run_seconds >= 0
    assert not FutureJob.objects.exists()


# --- rule 8 and catch-up ------------------------------------------------------------------------


def test_catch_up__jobs_from_missed_slots_all_run_once(make_thing, register, t0):
    def rec(thing, job):
        RunLog.objects.create(check_name="rec", entity_key=str(thing.pk), pid=0, started=0)

    register("test.rec", rec)
    things = [make_thing() for _ in range(6)]
    for hours, thing in enumerate(things):
        job_for(thing, "test.rec", at=t0 + timedelta(hours=hours), now=t0)
    # Nothing ran for five hours; one tick catches up every missed slot, not the future one.
    summary = prescient.tick(t0 + timedelta(hours=4, minutes=20))
    assert summary.counts["completed"] == 5
    assert RunLog.objects.count() == 5
    assert FutureJob.objects.get().next_check_at == t0 + timedelta(hours=5)
    assert prescient.tick(t0 + timedelta(hours=4, minutes=20)).processed == 0


def test_tick__before_the_slot_runs_nothing(make_thing, returning, t0, calls):
    returning(None)
    job_for(make_thing(), now=t0, delay=timedelta(minutes=1))
    assert prescient.tick(t0 + timedelta(minutes=14, seconds=59)).processed == 0
    assert calls == []
    assert prescient.tick(t0 + SLOT).processed == 1


def test_tick__many_batches(make_thing, returning, t0, calls):
    returning(None)
    for _ in range(25):
        job_for(make_thing(), now=t0)
    summary = prescient.tick(t0, batch_size=7)
    assert summary.counts["completed"] == 25
    assert len(calls) == len(set(calls)) == 25


def test_idle_tick__is_one_query(db, make_job, t0, django_assert_num_queries):
    for _ in range(5):
        make_job(next_check_at=t0 + timedelta(days=1))
    # One query: EXISTS over the due index and EXISTS over the in-flight index.
    with django_assert_num_queries(1):
        assert prescient.tick(t0).processed == 0


def test_tick__summary_line_counts_outcomes(make_thing, returning, t0):
    returning(None)
    job_for(make_thing(), now=t0)
    line = prescient.tick(t0).line()
    assert line.startswith("prescient tick: processed=1 completed=1 ")


@pytest.mark.postgres
def test_due_query_uses_the_partial_index_with_100k_jobs(transactional_db, make_thing, t0):
    assert on_postgres()
    thing = make_thing()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO prescient_futurejob (entity_name, entity_key, job_exec, workflow, state, last_state,
                first_check_at, next_check_at, check_count, run_count, failure_count, total_run_seconds,
                last_error, recent_errors, reserved_by, end_requested, end_reason, created_at)
            SELECT 'testapp.thing', g::text, 'test.record', '', 'scheduled', '', %s + g * interval '1 minute',
                %s + g * interval '1 minute', 0, 0, 0, 0, '', '[]'::jsonb, '', '', '', %s
            FROM generate_series(1, 100000) AS g
            """,
            [t0, t0, t0],
        )
        cursor.execute("ANALYZE prescient_futurejob")
    due = FutureJob.objects.due(t0 + timedelta(minutes=30)).order_by("next_check_at", "id").values("pk")[:100]
    with transaction.atomic():
        plan = FutureJob.objects.filter(pk__in=due.select_for_update(skip_locked=True)).explain()
    assert "prescient_job_due" in plan, plan
    assert "Seq Scan" not in plan, plan
    # The idle tick's only query: both EXISTS are answered from the partial indexes.
    now = t0 - timedelta(days=1)
    with connection.cursor() as cursor:
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            assert prescient.tick(now).processed == 0
        assert len(queries) == 1
        cursor.execute("EXPLAIN " + queries[0]["sql"])
        idle_plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "prescient_job_due" in idle_plan and "prescient_job_in_flight" in idle_plan, idle_plan
    assert "Seq Scan" not in idle_plan, idle_plan
    assert thing.pk


def test_settle__a_row_in_an_impossible_state_is_skipped_not_fatal(make_job, t0):
    from prescient.engine.decisions import Decision, TickSummary
    from prescient.engine.store import settle
    from prescient.states import Event, Outcome

    token = "tick:0:odd"
    odd = make_job(state=State.BURIED, reserved_by=token, reserved_at=t0)  # buried yet reserved
    fine = make_job(state=State.RUNNING, reserved_by=token, reserved_at=t0)
    summary = TickSummary()
    settle(
        [Decision(job=odd, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True),
         Decision(job=fine, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True)],
        token, t0, summary,
    )
    assert summary.counts["discarded"] == 1 and summary.counts["completed"] == 1
    assert FutureJob.objects.get().pk == odd.pk
    assert JobHistory.objects.get().job_id == fine.pk


def test_a_tick__runs_due_jobs_by_priority_then_age_without_any_queue(make_thing, make_job, t0):
    """A priority-10 job due last runs first, even across batches; equal priorities run oldest first."""
    old_low = make_job("test.record", thing=make_thing(), next_check_at=t0 - timedelta(hours=2), priority=-1)
    old = make_job("test.record", thing=make_thing(), next_check_at=t0 - timedelta(hours=1))
    new = make_job("test.record", thing=make_thing(), next_check_at=t0)
    urgent = make_job("test.record", thing=make_thing(), next_check_at=t0, priority=10)
    later_urgent = make_job("test.record", thing=make_thing(), next_check_at=t0 + timedelta(minutes=15), priority=99)
    summary = prescient.tick(t0, batch_size=1)
    assert summary.processed == 4
    ran = list(RunLog.objects.filter(check_name="test.record").order_by("pk").values_list("entity_key", flat=True))
    assert ran == [job.entity_key for job in (urgent, old, new, old_low)]
    assert FutureJob.objects.get().pk == later_urgent.pk, "not due yet, whatever its priority"
