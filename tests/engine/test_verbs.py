"""A person's commands on one job: kill, run now, sleep; cancel; buried jobs of lost workers."""

import re
from datetime import datetime, timedelta

import pytest

import prescient
from prescient.engine import store
from prescient.engine import verbs as services
from prescient.engine.decisions import Decision, TickSummary
from prescient.engine.verbs import JobNotFound
from prescient.exceptions import InvalidTime, InvalidTransition
from prescient.maintenance import rescuer
from prescient.models import FutureJob, JobHistory
from prescient.states import Event, Outcome, State
from tests.conftest import lose_claims
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db

SLOT = timedelta(minutes=15)
TOKEN = "tick:0:verbs"


def in_flight(make_job, state, reserved_at, **fields):
    """A job whose run is in flight, by default under TOKEN (running, or paused while running)."""
    if state == State.PAUSED:
        fields["last_state"] = State.RUNNING
    fields.setdefault("reserved_by", TOKEN)
    return make_job(state=state, reserved_at=reserved_at, **fields)


def settle(job, t0, event=Event.RESCHEDULE, **decision):
    """What the tick does when the run in flight returns."""
    job = FutureJob.objects.get(pk=job.pk)
    decision.setdefault("next_check_at", t0 + timedelta(hours=1))
    summary = TickSummary()
    store.settle([Decision(job=job, event=event, ran=True, **decision)], job.reserved_by, t0, summary)
    return summary


# --- kill ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [State.SCHEDULED, State.PAUSED, State.BURIED])
def test_kill__of_a_job_with_no_run_in_flight__ends_it_at_once(make_job, t0, state):
    job = make_job(state=state, last_state=State.SCHEDULED if state == State.PAUSED else "")
    assert services.kill(job.pk, "  not needed any more  ", now=t0) == "ended"
    assert not FutureJob.objects.exists()
    row = JobHistory.objects.get()
    assert (row.job_id, row.outcome, row.reason, row.finished_at) == (job.pk, Outcome.KILLED, "not needed any more", t0)


@pytest.mark.parametrize("state", [State.RUNNING, State.PAUSED])
def test_kill__of_a_job_whose_run_is_in_flight__ends_it_when_the_run_returns(make_job, t0, state):
    job = in_flight(make_job, state, t0)
    assert services.kill(job, "stop it", now=t0) == "requested"
    live = FutureJob.objects.get(pk=job.pk)
    assert (live.state, live.end_requested, live.end_reason) == (state, Outcome.KILLED, "stop it")
    assert not JobHistory.objects.exists()

    summary = settle(job, t0)  # the run asked for a re-check: discarded

    assert summary.counts["killed"] == 1 and summary.counts["rescheduled"] == 0
    assert not FutureJob.objects.exists()
    row = JobHistory.objects.get()
    assert (row.outcome, row.reason, row.run_count, row.check_count) == (Outcome.KILLED, "stop it", 1, 0)


def test_kill__during_its_own_run_in_a_tick__discards_the_result(register, make_thing, t0):
    def kill_myself(thing, job):
        assert services.kill(job.pk, "killed mid-run", now=t0) == "requested"
        return timedelta(hours=1)

    register("test.kill_myself", kill_myself)
    prescient.schedule(make_thing(), "test.kill_myself", now=t0)
    summary = prescient.tick(t0)
    assert summary.counts["killed"] == 1 and summary.counts["rescheduled"] == 0
    assert not FutureJob.objects.exists()
    row = JobHistory.objects.get()
    assert (row.outcome, row.reason, row.run_count) == (Outcome.KILLED, "killed mid-run", 1)


def test_kill__needs_a_reason(make_job):
    job = make_job()
    for reason in ("", "   ", None):
        with pytest.raises(ValueError, match="A kill needs a reason"):
            services.kill(job, reason)
    assert FutureJob.objects.get(pk=job.pk).state == State.SCHEDULED


def test_kill__of_an_unknown_or_finished_job__raises_job_not_found(make_job, t0):
    job = make_job()
    services.kill(job, "once", now=t0)
    for pk in (job.pk, 987654, "nonsense"):
        with pytest.raises(JobNotFound, match=re.escape(f"No live job with id {pk!r}")):
            services.kill(pk, "twice", now=t0)
    assert JobHistory.objects.count() == 1


def test_kill__of_a_lost_run__is_ended_killed_by_the_reaper_not_buried(make_job, t0):
    job = in_flight(make_job, State.RUNNING, t0 - timedelta(hours=2))
    assert services.kill(job, "stuck", now=t0) == "requested"
    summary = prescient.tick(t0)
    assert summary.counts["buried"] == 0
    assert not FutureJob.objects.exists()
    row = JobHistory.objects.get()
    assert (row.outcome, row.reason) == (Outcome.KILLED, "stuck")
    assert row.last_error.startswith("worker lost: reservation tick:0:verbs")


# --- run now -------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [State.SCHEDULED, State.BURIED])
def test_run_now__makes_the_job_due_at_once(make_job, t0, state):
    job = make_job(state=state, next_check_at=t0 + timedelta(days=3))
    now = t0 + timedelta(minutes=7)  # mid-slot: no waiting for the next boundary
    moved = services.run_now(job.pk, now=now)
    assert (moved.state, moved.next_check_at) == (State.SCHEDULED, now)
    assert FutureJob.objects.due(now).get().pk == job.pk
    assert prescient.tick(now).counts["completed"] == 1


def test_run_now__is_refused_for_a_running_job(make_job, t0):
    job = in_flight(make_job, State.RUNNING, t0)
    before = FutureJob.objects.filter(pk=job.pk).values().get()
    with pytest.raises(InvalidTransition, match=re.escape(f"Job {job.pk} is running: 'run_now' is not allowed")):
        services.run_now(job, now=t0)
    assert FutureJob.objects.filter(pk=job.pk).values().get() == before


def test_run_now__of_a_paused_job__releases_it_and_makes_it_due_now(make_job, t0):
    """Metafora's Run: Paused -> Runnable."""
    job = make_job(state=State.PAUSED, last_state=State.SCHEDULED, next_check_at=t0 + timedelta(days=3))
    now = t0 + timedelta(minutes=7)
    moved = services.run_now(job.pk, now=now)
    stored = FutureJob.objects.get(pk=job.pk)
    assert (moved.state, stored.state, stored.last_state, stored.next_check_at) == (
        State.SCHEDULED, State.SCHEDULED, "", now
    )
    assert prescient.tick(now).counts["completed"] == 1


def test_run_now__of_a_job_paused_while_running__releases_it_without_starting_it_again(make_job, t0):
    job = in_flight(make_job, State.PAUSED, t0, next_check_at=t0)
    moved = services.run_now(job.pk, now=t0 + SLOT)
    stored = FutureJob.objects.get(pk=job.pk)
    assert (moved.state, stored.state, stored.last_state, stored.reserved_by) == (
        State.RUNNING, State.RUNNING, "", TOKEN
    )
    assert stored.next_check_at == t0  # its run goes on and settles as usual
    assert not FutureJob.objects.due(t0 + SLOT).exists()


def test_run_now__of_an_unknown_job__raises_job_not_found(db, t0):
    with pytest.raises(JobNotFound):
        services.run_now(424242, now=t0)


# --- buried: lost workers --------------------------------------------------------------------------


def test_a_stale_reservation__is_buried_by_the_tick_then_run_now_runs_it_once(settings, make_job, t0, clock):
    settings.PRESCIENT = {**settings.PRESCIENT, "TIMEOUT_SECONDS": 2}  # stale after 62 s
    # Leases are judged by the database's clock (``clock``), whatever ``now`` the tick is given.
    job = in_flight(make_job, State.RUNNING, clock - timedelta(seconds=63))
    fresh = in_flight(make_job, State.RUNNING, clock - timedelta(seconds=61), reserved_by="tick:1:fresh")

    summary = prescient.tick(t0)

    assert summary.counts["buried"] == 1 and summary.processed == 0
    buried = FutureJob.objects.get(pk=job.pk)
    assert (buried.state, buried.reserved_by, buried.reserved_at, buried.last_state) == (State.BURIED, "", None, "")
    assert buried.last_error.startswith(f"worker lost: reservation {TOKEN} from ")
    assert buried.recent_errors[-1]["error"] == buried.last_error
    assert FutureJob.objects.get(pk=fresh.pk).state == State.RUNNING
    FutureJob.objects.filter(pk=fresh.pk).update(reserved_at=clock - timedelta(seconds=63))  # time passes
    assert prescient.tick(t0 + SLOT).counts["buried"] == 1  # the other one went stale meanwhile
    assert not RunLog.objects.exists(), "a buried job is never run by itself"

    assert services.run_now(job.pk, now=t0 + SLOT).state == State.SCHEDULED
    summary = prescient.tick(t0 + SLOT)

    assert summary.counts["completed"] == 1
    assert RunLog.objects.filter(entity_key=job.entity_key).count() == 1
    assert JobHistory.objects.get(job_id=job.pk).outcome == Outcome.COMPLETED


def test_a_buried_jobs_lost_worker__returning_late_has_its_result_discarded(make_job, t0):
    job = in_flight(make_job, State.RUNNING, t0 - timedelta(hours=1))
    stale = FutureJob.objects.get(pk=job.pk)  # what the lost worker still holds
    assert rescuer.rescue(t0) == {"buried": 1}
    summary = TickSummary()
    store.settle([Decision(job=stale, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True)], TOKEN, t0, summary)
    assert summary.counts["discarded"] == 1
    assert FutureJob.objects.get(pk=job.pk).state == State.BURIED
    assert not JobHistory.objects.exists()


def test_stale_after_seconds__is_read_from_the_settings(settings, make_job, t0, clock):
    settings.PRESCIENT = {**settings.PRESCIENT, "STALE_AFTER_SECONDS": 3600}
    job = in_flight(make_job, State.PAUSED, clock - timedelta(minutes=59))
    assert rescuer.rescue(t0) == {}
    FutureJob.objects.filter(pk=job.pk).update(reserved_at=clock - timedelta(minutes=61))  # two minutes pass
    assert rescuer.rescue(t0 + timedelta(minutes=2)) == {"buried": 1}
    assert FutureJob.objects.get(pk=job.pk).state == State.BURIED


def test_a_buried_job__can_be_killed_but_not_paused_or_released(make_job, t0):
    job = make_job(state=State.BURIED)
    for verb in (services.pause, services.release):
        with pytest.raises(InvalidTransition, match=f"Job {job.pk} is buried: '{verb.__name__}' is not allowed"):
            verb(job=job, now=t0)
    assert services.kill(job, "give up", now=t0) == "ended"
    assert JobHistory.objects.get().outcome == Outcome.KILLED


# --- sleep ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "to"),
    [(State.SCHEDULED, State.SCHEDULED), (State.BURIED, State.SCHEDULED), (State.PAUSED, State.PAUSED)],
)
def test_sleep__moves_the_due_time_rounded_up_to_a_slot(make_job, t0, state, to):
    job = make_job(state=state, last_state=State.SCHEDULED if state == State.PAUSED else "")
    moved = services.sleep(job.pk, t0 + timedelta(hours=5, minutes=1), now=t0)
    stored = FutureJob.objects.get(pk=job.pk)
    assert (moved.state, stored.state, stored.next_check_at) == (to, to, t0 + timedelta(hours=5, minutes=15))
    assert stored.last_state == (State.SCHEDULED if to == State.PAUSED else "")


def test_sleep__on_a_slot_boundary_keeps_it(make_job, t0):
    job = make_job()
    assert services.sleep(job, t0 + 4 * SLOT, now=t0).next_check_at == t0 + 4 * SLOT


@pytest.mark.parametrize("state", [State.RUNNING, State.PAUSED])
def test_sleep__of_a_job_whose_run_is_in_flight__is_deferred_until_the_run_returns(make_job, t0, state):
    """Deferred like kill: the run's result is discarded (its error kept) and the job is due at ``at``."""
    job = in_flight(make_job, state, t0, next_check_at=t0)
    assert services.sleep(job, t0 + 8 * SLOT, now=t0).pk == job.pk
    stored = FutureJob.objects.get(pk=job.pk)
    assert (stored.state, stored.next_check_at, stored.sleep_until) == (state, t0, t0 + 8 * SLOT)
    # The run returns: it asked for a re-check in an hour, and failed before that; both discarded.
    ran = FutureJob.objects.get(pk=job.pk)
    ran.failure_count, ran.last_error = 1, "ValueError: boom"
    summary = TickSummary()
    store.settle(
        [Decision(job=ran, event=Event.RETRY, next_check_at=t0 + SLOT, error="ValueError: boom", ran=True)],
        TOKEN, t0, summary,
    )
    stored = FutureJob.objects.get(pk=job.pk)
    expected = State.PAUSED if state == State.PAUSED else State.SCHEDULED
    assert (stored.state, stored.next_check_at, stored.sleep_until, stored.reserved_by) == (
        expected, t0 + 8 * SLOT, None, ""
    )
    assert (stored.failure_count, stored.last_error, stored.check_count, stored.run_count) == (
        1, "ValueError: boom", 0, 1
    )
    assert summary.counts["slept"] == 1 and "slept=1" in summary.line()


def test_sleep__of_a_running_job_whose_worker_is_lost__is_due_when_asked(make_job, t0):
    job = in_flight(make_job, State.RUNNING, t0, reserved_by="worker:lost/1")
    services.sleep(job, t0 + 8 * SLOT, now=t0)
    lose_claims(job.pk)
    assert rescuer.rescue(t0) == {"slept": 1}
    stored = FutureJob.objects.get(pk=job.pk)
    assert (stored.state, stored.next_check_at, stored.sleep_until, stored.failure_count) == (
        State.SCHEDULED, t0 + 8 * SLOT, None, 0
    )


def test_sleep__refuses_naive_and_beyond_horizon_times(make_job, t0):
    job = make_job()
    with pytest.raises(InvalidTime, match="naive"):
        services.sleep(job, datetime(2026, 12, 1, 9, 0), now=t0)
    with pytest.raises(InvalidTime, match="beyond the horizon of check 'test.record'"):
        services.sleep(job, t0 + timedelta(days=31), now=t0)
    assert FutureJob.objects.get(pk=job.pk).next_check_at == t0


# --- cancel --------------------------------------------------------------------------------------


def test_cancel__ends_a_pending_job_cancelled(make_thing, t0):
    thing = make_thing()
    prescient.schedule(thing, "test.record", delay=timedelta(hours=1), now=t0)
    assert prescient.cancel(thing, "test.record", now=t0) is True
    assert prescient.cancel(thing, "test.record", now=t0) is False
    row = JobHistory.objects.get()
    assert (row.outcome, row.reason) == (Outcome.CANCELLED, "cancelled")


def test_cancel__during_the_run__ends_the_job_cancelled_when_the_run_returns(register, make_thing, t0):
    def cancel_myself(thing, job):
        assert services.cancel(thing, "test.cancel_myself", now=t0) is True
        return timedelta(hours=1)

    register("test.cancel_myself", cancel_myself)
    prescient.schedule(make_thing(), "test.cancel_myself", now=t0)
    assert prescient.tick(t0).counts["cancelled"] == 1
    assert JobHistory.objects.get().outcome == Outcome.CANCELLED
    assert not FutureJob.objects.exists()


def test_the_verbs__are_exported_lazily_from_the_package():
    for name in ("pause", "release", "kill", "run_now", "sleep", "cancel", "schedule", "JobNotFound"):
        assert getattr(prescient, name) is getattr(services, name)
