"""Issue #15 in-process: RELEASE, should_stop(), checkpoints, a pause that stops what has not
started, and the error_rate policy. Time is passed in; the one test with a thread bounds its
loop and asserts no duration."""

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection

import prescient
from prescient import interrupts
from prescient.engine import store, sweep
from prescient.engine import verbs as services
from prescient.engine.decisions import TickSummary
from prescient.models import CHECKPOINT_LIMIT, FutureJob, JobHistory
from prescient.retries import error_rate
from prescient.states import Event, Outcome, State
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db

SLOT = timedelta(minutes=15)


@pytest.fixture(autouse=True)
def _fresh_interrupts():
    interrupts.reset()
    yield
    interrupts.reset()


# --- RELEASE -------------------------------------------------------------------------------------


@pytest.mark.parametrize("paused", [False, True])
def test_release__hands_the_claim_back_with_nothing_counted_due_at_the_next_slot(register, make_job, t0, paused):
    def check(thing, job):
        if paused:
            services.pause(job=job.pk, now=t0)
        return prescient.RELEASE

    register("test.release", check)
    job = make_job("test.release", next_check_at=t0)
    now = t0 + timedelta(minutes=3)
    summary = prescient.tick(now)
    assert summary.counts["handed_back"] == 1 and summary.processed == 0
    stored = FutureJob.objects.get(pk=job.pk)
    assert (stored.run_count, stored.failure_count, stored.check_count, stored.reserved_by) == (0, 0, 0, "")
    assert stored.next_check_at == t0 + SLOT
    if paused:
        assert (stored.state, stored.last_state) == (State.PAUSED, State.SCHEDULED)
    else:
        assert (stored.state, stored.last_state) == (State.SCHEDULED, "")


def test_release__is_one_value_across_pickling():
    import pickle

    assert pickle.loads(pickle.dumps(prescient.RELEASE)) is prescient.RELEASE
    assert repr(prescient.RELEASE) == "prescient.RELEASE"


# --- should_stop ---------------------------------------------------------------------------------


def test_should_stop__follows_the_requests_of_this_claim_only(make_job, t0):
    job = make_job(state=State.RUNNING, reserved_by="tick:1:a", reserved_at=t0)
    assert not job.should_stop()
    interrupts.ask("tick:1:other", [job.pk])  # an earlier claim of the same job
    assert not job.should_stop()
    interrupts.ask("tick:1:a", [job.pk])
    assert job.should_stop()
    interrupts.forget("tick:1:a")
    assert not job.should_stop()
    interrupts.ask_all()
    assert job.should_stop()


def test_asked_to_stop__finds_the_claims_paused_killed_or_slept_since(make_job, t0):
    token = "worker:w/1"
    running = make_job(state=State.RUNNING, reserved_by=token, reserved_at=t0)
    paused = make_job(state=State.RUNNING, reserved_by=token, reserved_at=t0)
    killed = make_job(state=State.RUNNING, reserved_by=token, reserved_at=t0)
    slept = make_job(state=State.RUNNING, reserved_by="worker:w/2", reserved_at=t0)
    other = make_job(state=State.RUNNING, reserved_by="worker:x/1", reserved_at=t0)
    services.pause(job=paused.pk, now=t0)
    services.kill(killed.pk, "no", now=t0)
    services.sleep(slept.pk, t0 + 4 * SLOT, now=t0)
    services.pause(job=other.pk, now=t0)
    found = store.asked_to_stop("worker:w/", prefix=True)
    assert sorted(found) == sorted([(token, paused.pk), (token, killed.pk), ("worker:w/2", slept.pk)])
    assert running.pk not in {pk for _, pk in found}
    assert sorted(store.asked_to_stop(token)) == sorted([(token, paused.pk), (token, killed.pk)])


@pytest.mark.django_db(transaction=True)
def test_tick__a_pause_reaches_a_running_check_which_stops_paused_with_nothing_counted(register, make_job, t0):
    """The tick's guard sees the pause (made from another thread, as a person would) and the
    check's loop sees should_stop(). The loop is bounded so a failure cannot hang the suite."""
    seen = {}

    def check(thing, job):
        def pause_it():
            services.pause(job=job.pk)
            connection.close()

        threading.Timer(0.2, pause_it).start()
        for _ in range(1000):  # at most about 10 s
            if job.should_stop():
                seen["stopped"] = True
                return prescient.RELEASE
            threading.Event().wait(0.01)
        return None

    register("test.loop", check, timeout_seconds=30)
    job = make_job("test.loop", next_check_at=t0)
    summary = prescient.tick(t0)
    assert seen == {"stopped": True}
    stored = FutureJob.objects.get(pk=job.pk)
    assert (stored.state, stored.last_state, stored.failure_count, stored.run_count) == (
        State.PAUSED, State.SCHEDULED, 0, 0
    )
    assert summary.counts["handed_back"] == 1 and not JobHistory.objects.exists()


# --- a pause takes back what has not started; what started runs --------------------------------


@pytest.mark.parametrize("how", ["workflow", "job"])
def test_run_group__a_pause_while_the_first_runs_takes_back_the_reserved_others(register, make_job, t0, how):
    def check(thing, job):
        RunLog.objects.create(check_name="test.first", entity_key=thing.pk, pid=0, started=0)
        if how == "workflow":
            services.pause(workflow="w", now=t0)
        else:
            for other in FutureJob.objects.exclude(pk=job.pk):
                services.pause(job=other.pk, now=t0)

    register("test.first", check)
    jobs = [make_job("test.first", next_check_at=t0, workflow="w") for _ in range(3)]
    token = sweep.new_token()
    claimed = store.claim(t0, 10, token)
    assert {FutureJob.objects.get(pk=job.pk).state for job in jobs} == {State.RESERVED}
    # A group of one starts and runs; the pause it makes takes the two still reserved back.
    decisions = [*sweep.run_group(claimed[:1], token, t0), *sweep.run_group(claimed[1:], token, t0)]
    assert [d.event for d in decisions] == [Event.FINISH, Event.HAND_BACK, Event.HAND_BACK]
    summary = TickSummary()
    store.settle(decisions, token, t0, summary)
    assert RunLog.objects.count() == 1
    for job in jobs[1:]:
        stored = FutureJob.objects.get(pk=job.pk)
        assert (stored.state, stored.last_state, stored.run_count, stored.failure_count) == (
            State.PAUSED, State.SCHEDULED, 0, 0
        )
        assert (stored.reserved_by, stored.check_count) == ("", 0)
        assert stored.next_check_at == t0  # remembering its time
    assert summary.counts[Outcome.COMPLETED] == 1 and summary.counts["handed_back"] == 2


def test_run_group__a_started_job_paused_before_its_turn_still_runs_and_is_told_to_stop(register, make_job, t0):
    """``running`` means its code will run: a pause (seen as a request to stop, as NOTIFY or the
    tick's guard tells it) reaches the check through should_stop() and applies when it returns."""
    seen = []

    def check(thing, job):
        seen.append((job.pk, job.should_stop()))
        return timedelta(hours=1)  # asks for a re-check: the pause keeps it, remembering scheduled

    register("test.ask", check)
    jobs = [make_job("test.ask", next_check_at=t0) for _ in range(3)]
    token = sweep.new_token()
    claimed = store.claim(t0, 10, token)
    assert store.start_runs(claimed, token) == {job.pk for job in jobs}
    services.pause(job=jobs[1].pk, now=t0)
    interrupts.ask(token, [jobs[1].pk])
    decisions = list(sweep.run_group(claimed, token, t0, started=True))
    assert [d.event for d in decisions] == [Event.RESCHEDULE] * 3
    assert seen == [(jobs[0].pk, False), (jobs[1].pk, True), (jobs[2].pk, False)]
    store.settle(decisions, token, t0, TickSummary())
    paused = FutureJob.objects.get(pk=jobs[1].pk)
    assert (paused.state, paused.last_state, paused.check_count, paused.run_count) == (
        State.PAUSED, State.SCHEDULED, 1, 1
    )


def test_run_group__a_stopping_worker_starts_nothing_more(register, make_job, t0):
    ran = []
    register("test.ask", lambda thing, job: ran.append(job.pk))
    for _ in range(2):
        make_job("test.ask", next_check_at=t0)
    token = sweep.new_token()
    claimed = store.claim(t0, 10, token)
    interrupts.ask_all()
    assert [d.event for d in sweep.run_group(claimed, token, t0)] == [Event.HAND_BACK, Event.HAND_BACK]
    assert ran == []


# --- checkpoints ---------------------------------------------------------------------------------


def test_checkpoint__is_seen_by_the_next_run_and_kept_in_the_history_row(register, make_job, t0):
    seen = []

    def check(thing, job):
        seen.append(job.checkpoint_data)
        job.checkpoint({"page": len(seen)})
        if len(seen) == 1:
            raise ValueError("first run fails after its checkpoint")
        return None

    register("test.cp", check, max_retries=3)
    job = make_job("test.cp", next_check_at=t0)
    prescient.tick(t0)
    assert FutureJob.objects.get(pk=job.pk).checkpoint_data == {"page": 1}
    prescient.tick(t0 + SLOT)
    assert seen == [None, {"page": 1}]
    row = JobHistory.objects.get(job_id=job.pk)
    assert (row.outcome, row.checkpoint_data) == (Outcome.COMPLETED, {"page": 2})


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        ({"when": object()}, TypeError, "must be JSON"),
        (float("nan"), TypeError, "must be JSON"),
        ("x" * (CHECKPOINT_LIMIT + 1), ValueError, "at most 65536 bytes"),
        ({"a": "bad\x00"}, ValueError, "NUL"),
    ],
)
def test_checkpoint__that_is_not_json_or_too_large__raises_in_the_check_and_writes_nothing(
    register, make_job, t0, data, error, match
):
    raised = []

    def check(thing, job):
        try:
            job.checkpoint(data)
        except error as exc:
            raised.append(str(exc))
        job.checkpoint({"ok": True})
        job.checkpoint(data)  # uncaught: a failed run

    register("test.cp_bad", check)
    job = make_job("test.cp_bad", next_check_at=t0)
    assert prescient.tick(t0).counts["retried"] == 1
    assert raised and match in raised[0]
    stored = FutureJob.objects.get(pk=job.pk)
    assert stored.checkpoint_data == {"ok": True} and stored.failure_count == 1


def test_checkpoint__just_under_the_limit_is_kept(register, make_job, t0):
    data = "x" * (CHECKPOINT_LIMIT - len(json.dumps("")))
    register("test.cp_big", lambda thing, job: job.checkpoint(data))
    job = make_job("test.cp_big", next_check_at=t0)
    prescient.tick(t0)
    assert JobHistory.objects.get(job_id=job.pk).checkpoint_data == data


def test_checkpoint__of_a_run_that_lost_its_claim_is_not_kept(make_job, t0, caplog):
    job = make_job(state=State.RUNNING, reserved_by="tick:1:a", reserved_at=t0)
    stale = FutureJob.objects.get(pk=job.pk)
    stale.reserved_by = "tick:1:gone"
    stale.checkpoint({"page": 3})
    assert FutureJob.objects.get(pk=job.pk).checkpoint_data is None
    assert "checkpoint not kept" in caplog.text


# --- error_rate ----------------------------------------------------------------------------------


def _fail_at(register, make_job, times, **options):
    register("test.fails", lambda thing, job: 1 / 0, error_handler=error_rate(**options), max_retries=0)
    job = make_job("test.fails", next_check_at=times[0])
    outcomes = []
    for now in times:
        FutureJob.objects.filter(pk=job.pk).update(next_check_at=now)
        prescient.tick(now)
        stored = FutureJob.objects.filter(pk=job.pk).first()
        outcomes.append("failed" if stored is None else stored.next_check_at - now)
    return outcomes


def test_error_rate__fails_on_the_8th_error_within_4_hours(register, make_job, t0):
    times = [t0 + i * 2 * SLOT for i in range(8)]  # 8 errors in 3.5 hours
    outcomes = _fail_at(register, make_job, times)
    assert outcomes[:7] == [SLOT] * 7  # 10 minutes later, rounded up to a slot
    assert outcomes[7] == "failed"
    row = JobHistory.objects.get()
    # The history says the rate was exceeded (#28 item 7), not only that the job failed.
    assert row.outcome == Outcome.FAILED
    assert row.reason == "error rate exceeded: 8 failed runs within 4:00:00 (the limit is 8)"
    assert row.asked_check_at is None


def test_error_rate__does_not_fail_on_errors_spread_wider(register, make_job, t0):
    times = [t0 + i * timedelta(minutes=45) for i in range(12)]  # never 8 within 4 hours
    assert _fail_at(register, make_job, times) == [SLOT] * 12


def test_error_rate__takes_its_own_limits(register, make_job, t0):
    times = [t0, t0 + SLOT, t0 + 2 * SLOT]
    outcomes = _fail_at(register, make_job, times, max_errors=3, within=timedelta(hours=1),
                        retry_after=timedelta(minutes=31))
    assert outcomes == [3 * SLOT, 3 * SLOT, "failed"]
    assert JobHistory.objects.get().reason == "error rate exceeded: 3 failed runs within 1:00:00 (the limit is 3)"


def test_retries_exhausted__keep_no_reason_of_their_own(register, make_job, t0):
    register("test.fails", lambda thing, job: 1 / 0, max_retries=0)
    make_job("test.fails", next_check_at=t0)
    prescient.tick(t0)
    assert (JobHistory.objects.get().outcome, JobHistory.objects.get().reason) == (Outcome.FAILED, "")


def test_error_rate__is_exported_where_the_issue_names_it():
    assert prescient.errors.error_rate is error_rate
    with pytest.raises(ValueError, match="max_errors"):
        error_rate(max_errors=0)
    with pytest.raises(TypeError, match="callable"):
        prescient.check("x.y", model="testapp.Thing", error_handler="prescient.retries.retry_next_slot")
