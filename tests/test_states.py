"""The transition table (prescient.states): every (state, event) pair through the real code path,
the generated docs, and the error policy that chooses between ``retry`` and ``finish``."""

import re
from datetime import timedelta
from pathlib import Path

import pytest

import prescient
from prescient import states
from prescient.clock import db_now
from prescient.engine import store, sweep
from prescient.engine import verbs as services
from prescient.engine.decisions import Decision, TickSummary
from prescient.exceptions import InvalidTransition
from prescient.maintenance import rescuer, waiters
from prescient.models import FutureJob, JobHistory
from prescient.states import END, LAST, MOVES, RUN_EVENTS, Event, Outcome, State

pytestmark = pytest.mark.django_db

SLOT = timedelta(minutes=15)
TOKEN = "tick:0:walk"
WORKER_TOKEN = sweep.WORKER_TOKEN_PREFIX + "0:walk"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "states.md"

PAIRS = [(state, event) for state in State for event in Event]


def snapshot(pk):
    """The whole row (None once the job left the live table)."""
    return FutureJob.objects.filter(pk=pk).values().first()


def refused_message(pk, state, event):
    return re.escape(f"Job {pk} is {state}: '{event}' is not allowed")


def job_in(make_job, thing, state, event, t0):
    """A job in ``state``; it has a run in flight when the state is running or the event needs one."""
    in_flight = state in (State.RESERVED, State.RUNNING) or event in RUN_EVENTS
    fields = {}
    if in_flight:
        # A stale reservation: of a tick (buried when stale) or, for reclaim, of a worker.
        token = WORKER_TOKEN if event == Event.RECLAIM else TOKEN
        fields.update(reserved_by=token, reserved_at=t0 - timedelta(hours=1))
    if state == State.PAUSED:
        fields["last_state"] = State.RUNNING if in_flight else State.SCHEDULED
    if state == State.BURIED:
        fields["last_error"] = "worker lost"
    return make_job("test.record", thing=thing, state=state, next_check_at=t0, **fields)


SETTLED_EVENTS = {Event.RESCHEDULE, Event.RETRY, Event.FINISH, Event.HAND_BACK}


def apply(event, job, thing, now):
    """Send ``event`` through the code that sends it in production."""
    if event == Event.CLAIM:
        return store.claim(now, 10, "tick:0:claimer")
    if event == Event.START:
        return store.start_runs([FutureJob.objects.get(pk=job.pk)], TOKEN)
    if event in (Event.BURY, Event.RECLAIM):
        return rescuer.rescue(now)
    if event == Event.UNBLOCK:
        return waiters.repair(now)  # the job has no parent left: the repair service unblocks it
    if event in (Event.RESCHEDULE, Event.RETRY, Event.FINISH, Event.HAND_BACK):
        decision = Decision(
            job=FutureJob.objects.get(pk=job.pk),
            event=event,
            outcome=Outcome.COMPLETED if event == Event.FINISH else "",
            next_check_at=now + timedelta(hours=1) if event in (Event.RESCHEDULE, Event.RETRY) else None,
            ran=event != Event.HAND_BACK,
        )
        summary = TickSummary()
        store.settle([decision], TOKEN, now, summary)
        return summary
    if event == Event.PAUSE:
        return services.pause(job=job.pk, now=now)
    if event == Event.RELEASE:
        return services.release(job=job.pk, now=now)
    if event == Event.RUN_NOW:
        return services.run_now(job.pk, now=now)
    if event == Event.SLEEP:
        return services.sleep(job.pk, now + timedelta(minutes=50), now=now)
    if event == Event.KILL:
        return services.kill(job.pk, "walking the table", now=now)
    if event == Event.CANCEL:
        return services.cancel(thing, "test.record", now=now)
    raise AssertionError(f"no code path for {event}")  # pragma: no cover


#: Events whose production code skips ineligible rows instead of raising (they work on many rows).
SILENT_WHEN_REFUSED = {Event.CLAIM, Event.START, Event.BURY, Event.RECLAIM, Event.UNBLOCK}

#: The outcome each ending event gives.
ENDING_OUTCOME = {Event.KILL: Outcome.KILLED, Event.CANCEL: Outcome.CANCELLED, Event.FINISH: Outcome.COMPLETED}


@pytest.mark.parametrize(("state", "event"), PAIRS, ids=[f"{s.value}-{e.value}" for s, e in PAIRS])
def test_every_state_and_event__lands_where_the_table_says_or_is_refused(make_job, make_thing, t0, state, event):
    thing = make_thing()
    job = job_in(make_job, thing, state, event, t0)
    before = snapshot(job.pk)
    allowed = (state, event) in MOVES

    if not allowed:
        with pytest.raises(InvalidTransition, match=refused_message(job.pk, state.value, event.value)):
            states.target(FutureJob.objects.get(pk=job.pk), event)
        if event in SILENT_WHEN_REFUSED:
            apply(event, job, thing, t0)
        elif event in SETTLED_EVENTS:
            # settle() refuses through the table too, but discards that one result (and logs
            # it) rather than failing the rest of its batch.
            assert apply(event, job, thing, t0).counts["discarded"] == 1
        else:
            with pytest.raises(InvalidTransition, match=refused_message(job.pk, state.value, event.value)) as info:
                apply(event, job, thing, t0)
            assert (info.value.job_id, info.value.state, info.value.event) == (job.pk, state.value, event.value)
        assert snapshot(job.pk) == before, "a refused event changed the job"
        assert not JobHistory.objects.exists()
        return

    expected = MOVES[(state, event)]
    if expected == LAST:
        expected = before["last_state"]
    apply(event, job, thing, t0)
    after = snapshot(job.pk)

    deferred = before["reserved_by"] and state != State.RESERVED  # a reserved job's code never started
    if deferred and event == Event.SLEEP:
        # Deferred like kill: the run in flight returns, its result is discarded, and the job
        # is due when asked (a paused one stays paused).
        assert after["state"] == state and after["sleep_until"] == t0 + timedelta(minutes=60)
        settle_completed(job.pk, t0)
        after = snapshot(job.pk)
        assert after["next_check_at"] == t0 + timedelta(minutes=60) and after["sleep_until"] is None

    if expected != END:
        assert after is not None, "the job left the live table"
        assert after["state"] == expected
        if event == Event.START:  # the run started: its claim holds, stamped
            assert after["reserved_by"] == TOKEN and after["run_started_at"] is not None
        elif event in RUN_EVENTS:
            assert after["reserved_by"] == "", "the run settled but its reservation is still held"
        if expected == State.PAUSED:
            assert after["last_state"] in (State.SCHEDULED, State.RUNNING)
        if state == State.RESERVED and event not in (Event.START, Event.RELEASE):  # taken back, untouched
            assert after["reserved_by"] == "" and after["run_started_at"] is None
            assert after["check_count"] == before["check_count"] and after["failure_count"] == before["failure_count"]
            if expected == State.PAUSED:
                assert after["last_state"] == State.SCHEDULED
        if event in RUN_EVENTS and expected == State.PAUSED:
            assert after["last_state"] == State.SCHEDULED  # rule 3: the run is over
        if (state, event) == (State.WAITING, Event.PAUSE):
            assert after["last_state"] == State.PAUSED  # kept for when it is unblocked
        elif expected != State.PAUSED:
            assert after["last_state"] == ""
        assert not JobHistory.objects.exists()
        return

    if deferred and event in (Event.KILL, Event.CANCEL):
        # Deferred: the run in flight returns first, then the job ends and its result is discarded.
        assert after["state"] == state
        assert after["end_requested"] == ENDING_OUTCOME[event]
        assert not JobHistory.objects.exists()
        settle_completed(job.pk, t0)
        after = snapshot(job.pk)
    assert after is None
    history = JobHistory.objects.get()
    assert (history.job_id, history.outcome) == (job.pk, ENDING_OUTCOME[event])


def settle_completed(pk, now):
    job = FutureJob.objects.get(pk=pk)
    store.settle(
        [Decision(job=job, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True)], job.reserved_by, now,
        TickSummary(),
    )


def test_every_table_entry__is_a_known_state_and_event_with_a_valid_target():
    targets = set(State) | {END, LAST}
    for (state, event), to in MOVES.items():
        assert state in State.values and event in Event.values
        assert to in targets
    assert MOVES[(State.PAUSED, Event.RELEASE)] == LAST
    assert all(event in Event.values for event in RUN_EVENTS)


@pytest.mark.parametrize(
    ("state", "event"),
    [pair for pair in MOVES if pair[1] in RUN_EVENTS],
    ids=lambda v: str(v),
)
def test_run_events__are_refused_without_a_run_in_flight(make_job, t0, state, event):
    job = make_job(state=state, last_state=State.SCHEDULED if state == State.PAUSED else "")
    with pytest.raises(InvalidTransition, match=rf"'{event.value}' is not allowed \(no run in flight\)"):
        states.target(job, event)


def test_release__of_a_paused_job_without_a_last_state__goes_to_scheduled(make_job, t0):
    job = make_job(state=State.PAUSED, last_state="")
    assert states.target(job, Event.RELEASE) == State.SCHEDULED
    assert services.release(job=job, now=t0) == 1
    assert FutureJob.objects.get(pk=job.pk).state == State.SCHEDULED


def test_claim__takes_only_due_scheduled_jobs(make_job, t0):
    due = make_job(next_check_at=t0)
    make_job(next_check_at=t0 + SLOT)
    for state in (State.RUNNING, State.PAUSED, State.BURIED):
        make_job(state=state, next_check_at=t0 - SLOT, reserved_by="tick:9:x" if state == State.RUNNING else "")
    claimed = store.claim(t0, 10, "tick:0:one")
    assert [job.pk for job in claimed] == [due.pk]
    # The lease is stamped by the database's clock, not by ``now`` (a replay cannot fake it).
    assert claimed[0].state == State.RESERVED and abs(claimed[0].reserved_at - db_now()) < timedelta(minutes=1)


def test_states_from__lists_the_states_an_event_leads_from():
    assert set(states.states_from(Event.PAUSE, State.PAUSED)) == {
        State.SCHEDULED, State.RESERVED, State.RUNNING, State.PAUSED
    }
    assert set(states.states_from(Event.BURY, State.BURIED)) == {State.RUNNING, State.PAUSED}
    assert set(states.states_from(Event.KILL, END)) == set(State)


def test_invalid_transition__is_a_prescient_error_exported_from_the_package(make_job):
    job = make_job(state=State.BURIED)
    with pytest.raises(prescient.PrescientError):
        states.target(job, Event.PAUSE)
    assert prescient.InvalidTransition is InvalidTransition


# --- the docs ------------------------------------------------------------------------------------


def test_docs__contain_exactly_the_rendered_table():
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(r"<!-- BEGIN generated states table -->\n(.*?)\n<!-- END generated states table -->", text, re.S)
    assert found, "docs/states.md lost its generated-table markers"
    assert found.group(1) == states.render_markdown(), (
        "docs/states.md is out of date: paste the output of `python -m prescient.states` between the markers"
    )


def test_render_markdown__has_a_row_per_state_and_a_cell_per_event():
    lines = states.render_markdown().splitlines()
    assert len(lines) == 2 + len(State)
    for state, line in zip(State, lines[2:], strict=True):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[0] == f"`{state.value}`"
        assert len(cells) == 1 + len(Event)
        for event, cell in zip(Event, cells[1:], strict=True):
            to = MOVES.get((state, event))
            assert cell == ("·" if to is None else f"**{to}**" if to in (END, LAST) else str(to))


# --- error policy: retry or fail ----------------------------------------------------------------


@pytest.fixture
def failing(register):
    def boom(thing, job):
        raise RuntimeError(f"boom {job.failure_count}")

    register("test.boom", boom)
    return "test.boom"


def run_failures(thing, check, t0, ticks):
    """Tick at each due time until the job ends or ``ticks`` runs; returns the due times seen."""
    due_times = []
    now = t0
    prescient.schedule(thing, check, now=t0)
    for _ in range(ticks):
        prescient.tick(now)
        job = FutureJob.objects.filter(entity_key=str(thing.pk)).first()
        if job is None:
            break
        due_times.append(job.next_check_at)
        now = job.next_check_at
    return due_times


def test_default_handler__retries_at_the_next_slot_then_fails_after_max_retries(settings, failing, make_thing, t0):
    settings.PRESCIENT = {**settings.PRESCIENT, "MAX_RETRIES": 2}
    thing = make_thing()
    due_times = run_failures(thing, failing, t0, ticks=10)
    assert due_times == [t0 + SLOT, t0 + 2 * SLOT]
    row = JobHistory.objects.get()
    assert (row.outcome, row.failure_count, row.run_count) == (Outcome.FAILED, 3, 3)
    assert row.last_error == "RuntimeError: boom 2"


def test_default_handler__a_retry_is_due_the_next_slot_even_mid_slot(failing, make_thing, t0):
    thing = make_thing()
    prescient.schedule(thing, failing, now=t0)
    summary = prescient.tick(t0 + timedelta(minutes=7))
    assert summary.counts["retried"] == 1
    job = FutureJob.objects.get()
    assert (job.state, job.next_check_at, job.failure_count) == (State.SCHEDULED, t0 + SLOT, 1)


def test_exponential_backoff__doubles_the_wait_then_fails(settings, failing, make_thing, t0):
    settings.PRESCIENT = {
        **settings.PRESCIENT, "ERROR_HANDLER": "prescient.retries.exponential_backoff", "MAX_RETRIES": 4,
    }
    thing = make_thing()
    due_times = run_failures(thing, failing, t0, ticks=10)
    waits = [b - a for a, b in zip([t0, *due_times], due_times, strict=False)]
    assert waits == [SLOT, 2 * SLOT, 4 * SLOT, 8 * SLOT]
    row = JobHistory.objects.get()
    assert (row.outcome, row.failure_count) == (Outcome.FAILED, 5)


def test_a_checks_own_max_retries__wins_over_the_setting(settings, register, make_thing, t0):
    settings.PRESCIENT = {**settings.PRESCIENT, "MAX_RETRIES": 5}

    def boom(thing, job):
        raise ValueError("nope")

    register("test.boom_once", boom, max_retries=0)
    prescient.schedule(make_thing(), "test.boom_once", now=t0)
    prescient.tick(t0)
    assert JobHistory.objects.get().outcome == Outcome.FAILED


def test_recent_errors__keep_only_the_last_recent_errors(settings, failing, make_thing, t0):
    settings.PRESCIENT = {**settings.PRESCIENT, "RECENT_ERRORS": 2, "MAX_RETRIES": 10}
    thing = make_thing()
    run_failures(thing, failing, t0, ticks=4)
    job = FutureJob.objects.get()
    assert job.failure_count == 4
    assert [entry["error"] for entry in job.recent_errors] == ["RuntimeError: boom 2", "RuntimeError: boom 3"]
    assert job.recent_errors[-1]["at"] == (t0 + 3 * SLOT).isoformat()
    assert job.last_error == "RuntimeError: boom 3"


def test_a_custom_handler__is_called_with_the_failure_counted(settings, failing, make_thing, t0):
    settings.PRESCIENT = {**settings.PRESCIENT, "ERROR_HANDLER": "tests.test_states.give_up_at_once"}
    seen.clear()
    prescient.schedule(make_thing(), failing, now=t0)
    prescient.tick(t0)
    assert seen == [(1, ["RuntimeError: boom 0"])]
    assert JobHistory.objects.get().outcome == Outcome.FAILED


seen: list = []


def give_up_at_once(job, check, now):
    seen.append((job.failure_count, [entry["error"] for entry in job.recent_errors]))
    return None


def test_a_failed_run_of_a_paused_job__retries_into_paused(register, make_thing, t0):
    def pause_then_fail(thing, job):
        services.pause(workflow="w", now=t0)
        return "not a time"  # a failed run whose writes (the pause) are kept: nothing was raised

    register("test.pause_fail", pause_then_fail)
    prescient.schedule(make_thing(), "test.pause_fail", workflow="w", now=t0)
    summary = prescient.tick(t0)
    assert summary.counts["retried"] == 1
    job = FutureJob.objects.get()
    assert (job.state, job.last_state, job.next_check_at) == (State.PAUSED, State.SCHEDULED, t0 + SLOT)
    assert job.failure_count == 1 and job.last_error.startswith("TypeError: check 'test.pause_fail' returned str")
