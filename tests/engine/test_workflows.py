"""Workflows with dependencies (issue #14): ``after=``, the ``waiting`` state, waiters moved on
when their parents end, pause and release, kill and cancel, and the repair duty.

Order is judged by the checks' own log (``RunLog``, one row per call, in call order); time is
passed in (``now``), nothing sleeps."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

import prescient
from prescient.engine import store
from prescient.engine.decisions import Decision, TickSummary
from prescient.exceptions import InvalidDependency, InvalidTransition, UnknownParent
from prescient.maintenance import waiters
from prescient.models import FutureJob, JobHistory, JobLink
from prescient.states import Event, Outcome, State
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


@pytest.fixture
def failing(register):
    def fail(thing, job):
        RunLog.objects.create(check_name="test.fail", entity_key=str(thing.pk), pid=0, started=0)
        raise RuntimeError("card declined")

    register("test.fail", fail, max_retries=0)
    return "test.fail"


def live(job):
    return FutureJob.objects.filter(pk=job.pk).first()


def ended(job):
    return JobHistory.objects.get(job_id=job.pk)


def order_of_runs():
    """Entity keys in the order their checks logged their calls."""
    return [log.entity_key for log in RunLog.objects.order_by("pk")]


# --- rule 1: waiting -----------------------------------------------------------------------------


def test_schedule_after__waits_and_is_never_due_or_claimed(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    child = prescient.schedule(make_thing(), "test.record", after=[parent], now=t0)

    assert child.state == State.WAITING
    assert list(JobLink.objects.values_list("parent_id", "child_id")) == [(parent.pk, child.pk)]
    assert not FutureJob.objects.due(t0 + 2 * HOUR).filter(pk=child.pk).exists()
    assert [job.pk for job in store.claim(t0 + 2 * HOUR, 10, "tick:0:t")] == [parent.pk]


def test_schedule_after__takes_ids_and_history_rows_and_refuses_unknown_ones(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", now=t0)
    with pytest.raises(UnknownParent, match="No job with id 99999"):
        prescient.schedule(make_thing(), "test.record", after=[parent.pk, 99999], now=t0)
    assert FutureJob.objects.count() == 1 and not JobLink.objects.exists()
    with pytest.raises(InvalidDependency, match="after takes jobs or job ids"):
        prescient.schedule(make_thing(), "test.record", after=["1"], now=t0)
    with pytest.raises(InvalidDependency, match="on_parent_failure must be one of"):
        prescient.schedule(make_thing(), "test.record", after=[parent], on_parent_failure="maybe", now=t0)
    child = prescient.schedule(make_thing(), "test.record", after=[parent.pk], now=t0)
    assert child.state == State.WAITING


# --- rule 2: release of waiters --------------------------------------------------------------------


def test_chain__each_runs_once_after_its_parent_in_one_tick(make_thing, t0):
    things = [make_thing() for _ in range(3)]
    charge = prescient.schedule(things[0], "test.record", workflow="order-42", now=t0)
    pack = prescient.schedule(things[1], "test.record", workflow="order-42", after=[charge], now=t0)
    ship = prescient.schedule(things[2], "test.record", workflow="order-42", after=[pack], now=t0)

    prescient.tick(t0)

    assert order_of_runs() == [str(t.pk) for t in things]
    assert {ended(job).outcome for job in (charge, pack, ship)} == {Outcome.COMPLETED}


def test_diamond__the_join_runs_once_after_both_branches(make_thing, t0):
    a, b, c, d = (make_thing() for _ in range(4))
    top = prescient.schedule(a, "test.record", now=t0)
    left = prescient.schedule(b, "test.record", after=[top], now=t0)
    right = prescient.schedule(c, "test.record", after=[top], now=t0)
    join = prescient.schedule(d, "test.record", after=[left, right], now=t0)

    summary = prescient.tick(t0)

    runs = order_of_runs()
    assert sorted(runs) == sorted(str(t.pk) for t in (a, b, c, d))  # each once
    assert runs[0] == str(a.pk) and runs[-1] == str(d.pk)
    assert summary.counts[Outcome.COMPLETED] == 4 and live(join) is None


def test_release__keeps_the_childs_own_due_time(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", now=t0)
    child = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, after=[parent], now=t0)
    prescient.tick(t0)
    row = live(child)
    assert (row.state, row.next_check_at) == (State.SCHEDULED, t0 + HOUR)
    prescient.tick(t0 + HOUR)
    assert ended(child).outcome == Outcome.COMPLETED


def test_failed_parent__cancels_two_levels_of_waiters_whose_checks_are_never_called(make_thing, t0, failing):
    charge = prescient.schedule(make_thing(), failing, now=t0)
    pack = prescient.schedule(make_thing(), "test.record", after=[charge], now=t0)
    ship = prescient.schedule(make_thing(), "test.record", after=[pack], now=t0)

    prescient.tick(t0)

    assert ended(charge).outcome == Outcome.FAILED
    assert (ended(pack).outcome, ended(pack).reason) == (Outcome.CANCELLED, f"parent job {charge.pk} ended failed")
    assert (ended(ship).outcome, ended(ship).reason) == (Outcome.CANCELLED, f"parent job {pack.pk} ended cancelled")
    assert not RunLog.objects.filter(check_name="test.record").exists()


def test_failed_parent__cancels_at_once_even_while_another_parent_runs(make_thing, t0, failing):
    bad = prescient.schedule(make_thing(), failing, now=t0)
    later = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    child = prescient.schedule(make_thing(), "test.record", after=[bad, later], now=t0)
    prescient.tick(t0)
    assert ended(child).outcome == Outcome.CANCELLED and live(later).state == State.SCHEDULED


def test_on_parent_failure_run__runs_the_child_anyway(make_thing, t0, failing):
    bad = prescient.schedule(make_thing(), failing, now=t0)
    cleanup = make_thing()
    child = prescient.schedule(cleanup, "test.record", after=[bad], on_parent_failure="run", now=t0)
    prescient.tick(t0)
    assert ended(child).outcome == Outcome.COMPLETED
    assert order_of_runs()[-1] == str(cleanup.pk)


# --- rule 3: parents already finished --------------------------------------------------------------


def test_after_finished_parents__counts_their_history_outcome(make_thing, t0, failing):
    good = prescient.schedule(make_thing(), "test.record", now=t0)
    bad = prescient.schedule(make_thing(), failing, now=t0)
    prescient.tick(t0)

    runs = prescient.schedule(make_thing(), "test.record", after=[good.pk], now=t0)
    assert live(runs).state == State.SCHEDULED
    cancelled = prescient.schedule(make_thing(), "test.record", after=[good, ended(bad)], now=t0)
    assert live(cancelled) is None
    assert ended(cancelled).reason == f"parent job {bad.pk} ended failed"


def test_schedule_many_after__links_every_new_job(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", now=t0)
    things = [make_thing() for _ in range(5)]
    assert prescient.schedule_many(things, "test.record", after=[parent], now=t0, batch_size=2) == 5
    assert FutureJob.objects.filter(state=State.WAITING).count() == 5
    assert JobLink.objects.filter(parent_id=parent.pk).count() == 5
    prescient.tick(t0)
    assert not FutureJob.objects.exists() and RunLog.objects.count() == 6


# --- rule 4: pause -------------------------------------------------------------------------------


def settle_completed(job, token, now):
    store.settle([Decision(job=job, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True)], token, now,
                 TickSummary())


def test_pause__leaves_waiting_jobs_waiting_and_a_child_unblocked_while_paused_waits_for_release(make_thing, t0):
    charge = prescient.schedule(make_thing(), "test.record", workflow="order-42", now=t0)
    pack = prescient.schedule(make_thing(), "test.record", workflow="order-42", after=[charge], now=t0)
    [running] = store.claim(t0, 10, "tick:0:seed")  # charge runs when the workflow is paused
    assert store.start_runs([running], "tick:0:seed") == {running.pk}  # its code has started

    assert prescient.pause(workflow="order-42", now=t0) == 1  # charge only
    assert live(pack).state == State.WAITING
    settle_completed(running, "tick:0:seed", t0)  # its run completes

    row = live(pack)
    assert (row.state, row.last_state) == (State.PAUSED, State.SCHEDULED)
    prescient.tick(t0)
    assert not RunLog.objects.exists()

    assert prescient.release(workflow="order-42", now=t0) == 1
    assert live(pack).state == State.SCHEDULED
    prescient.tick(t0)
    prescient.tick(t0)
    assert RunLog.objects.count() == 1 and ended(pack).outcome == Outcome.COMPLETED


def test_pause_of_a_waiting_job__is_kept_and_holds_once_its_parent_ends(make_thing, t0):
    """#28 item 8: the pause of one waiting job was dropped when its parent ended (the child
    became scheduled and ran). It stays waiting, keeps the pause, and is unblocked paused."""
    parent = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    child = prescient.schedule(make_thing(), "test.record", after=[parent], now=t0)
    assert prescient.pause(job=child, now=t0) == 1
    assert prescient.pause(job=child, now=t0) == 0  # idempotent
    assert (live(child).state, live(child).last_state) == (State.WAITING, State.PAUSED)
    prescient.sleep(child, t0 + 2 * HOUR, now=t0)  # its own due time moves; the pause stays
    assert (live(child).state, live(child).last_state) == (State.WAITING, State.PAUSED)
    with pytest.raises(InvalidTransition, match="is waiting: 'run_now' is not allowed"):
        prescient.run_now(child, now=t0)

    prescient.tick(t0 + HOUR)  # the parent runs and completes
    assert ended(parent).outcome == Outcome.COMPLETED
    assert (live(child).state, live(child).last_state) == (State.PAUSED, State.SCHEDULED)
    prescient.tick(t0 + 3 * HOUR)
    assert live(child).state == State.PAUSED and RunLog.objects.count() == 1  # held: not run

    assert prescient.release(job=child, now=t0) == 1
    prescient.tick(t0 + 3 * HOUR)
    assert ended(child).outcome == Outcome.COMPLETED


def test_release_of_a_waiting_job__drops_its_kept_pause(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    child = prescient.schedule(make_thing(), "test.record", workflow="w", after=[parent], now=t0)
    other = prescient.schedule(make_thing(), "test.record", workflow="w", after=[parent], now=t0)
    assert prescient.release(job=child, now=t0) == 0  # nothing kept: nothing to release
    prescient.pause(job=child, now=t0)
    prescient.pause(job=other, now=t0)
    assert prescient.release(job=child, now=t0) == 1
    assert prescient.release(workflow="w", now=t0) == 1  # the other's kept pause, as a workflow's release does
    assert {live(job).last_state for job in (child, other)} == {""}
    prescient.tick(t0 + HOUR)  # the parent completes; both are unblocked and run in the same pass
    assert {ended(job).outcome for job in (child, other)} == {Outcome.COMPLETED}


def test_pause_of_a_waiting_job__held_also_when_the_repair_duty_unblocks_it(make_thing, make_job, t0):
    parent = prescient.schedule(make_thing(), "test.record", now=t0)
    prescient.tick(t0)
    held = make_job(state=State.WAITING, next_check_at=t0)  # missed when its parent ended
    store.links.add([held.pk], [parent.pk], "cancel", t0)
    prescient.pause(job=held, now=t0)
    assert waiters.WaiterRepair().run_once(t0) == 1
    assert (live(held).state, live(held).last_state) == (State.PAUSED, State.SCHEDULED)


# --- rule 5: kill and cancel -----------------------------------------------------------------------


def test_kill_of_a_waiting_job__ends_it_and_cancels_its_waiters(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    pack = prescient.schedule(make_thing(), "test.record", after=[parent], now=t0)
    ship = prescient.schedule(make_thing(), "test.record", after=[pack], now=t0)

    assert prescient.kill(pack, "wrong address", now=t0) == "ended"

    assert (ended(pack).outcome, ended(pack).reason) == (Outcome.KILLED, "wrong address")
    assert (ended(ship).outcome, ended(ship).reason) == (Outcome.CANCELLED, f"parent job {pack.pk} ended killed")
    assert live(parent).state == State.SCHEDULED


def test_killed_parent__cancels_its_waiting_children(make_thing, t0):
    parent = prescient.schedule(make_thing(), "test.record", now=t0)
    children = [prescient.schedule(make_thing(), "test.record", after=[parent], now=t0) for _ in range(2)]
    prescient.kill(parent, "customer left", now=t0)
    assert {ended(child).outcome for child in children} == {Outcome.CANCELLED}


def test_cancel_of_a_waiting_job__by_entity_and_check(make_thing, t0):
    thing = make_thing()
    parent = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    child = prescient.schedule(thing, "test.record", after=[parent], now=t0)
    assert prescient.cancel(thing, "test.record", now=t0)
    assert ended(child).outcome == Outcome.CANCELLED


# --- rule 6: the repair duty -----------------------------------------------------------------------


def test_repair__unblocks_a_waiting_job_whose_parents_ended_without_moving_it_on(make_thing, make_job, t0, failing):
    parent = prescient.schedule(make_thing(), "test.record", now=t0)
    bad = prescient.schedule(make_thing(), failing, now=t0)
    prescient.tick(t0)
    # As an older version would have left them: links to parents that ended, the child waiting.
    missed = make_job(state=State.WAITING, next_check_at=t0)
    doomed = make_job(state=State.WAITING, next_check_at=t0)
    held = make_job(state=State.WAITING, next_check_at=t0)
    other = prescient.schedule(make_thing(), "test.record", at=t0 + HOUR, now=t0)
    store.links.add([missed.pk], [parent.pk], "cancel", t0)
    store.links.add([doomed.pk], [bad.pk], "cancel", t0)
    store.links.add([held.pk], [parent.pk, other.pk], "cancel", t0)

    assert waiters.WaiterRepair().run_once(t0) == 2

    assert live(missed).state == State.SCHEDULED
    assert ended(doomed).reason == f"parent job {bad.pk} ended failed"
    assert live(held).state == State.WAITING
    assert waiters.repair(t0) == 0


def test_waiter_repair__is_a_registered_upkeep_duty():
    from prescient.maintenance import registered_services

    assert "waiter_repair" in {service.name for service in registered_services()}


# --- concurrency -----------------------------------------------------------------------------------


@pytest.mark.postgres
def test_two_ticks_at_once__release_the_shared_child_once_and_it_runs_once(transactional_db, make_thing, t0):
    for _ in range(3):
        RunLog.objects.all().delete()
        left = prescient.schedule(make_thing(), "test.record", now=t0)
        right = prescient.schedule(make_thing(), "test.record", now=t0)
        join = prescient.schedule(make_thing(), "test.record", after=[left, right], now=t0)
        barrier = threading.Barrier(2)
        errors: list[Exception] = []

        def run_tick(barrier=barrier, errors=errors):
            try:
                barrier.wait(5)
                prescient.tick(t0, batch_size=1)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=run_tick) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        prescient.tick(t0)  # a tick whose release raced the other's end sweeps what is left
        assert RunLog.objects.filter(entity_key=join.entity_key).count() == 1
        assert ended(join).outcome == Outcome.COMPLETED
