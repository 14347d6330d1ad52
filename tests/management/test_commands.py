"""prescient_pause, prescient_release, prescient_kill and prescient_reap."""

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from prescient.models import FutureJob, JobHistory, Workflow
from prescient.states import Outcome, State
from tests.conftest import manage

pytestmark = pytest.mark.django_db

T0_ISO = "2026-11-22T10:00:00+00:00"


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def state_of(job):
    return FutureJob.objects.get(pk=job.pk).state


# --- prescient_pause / prescient_release ------------------------------------------------------


def test_pause_and_release_workflow__print_counts(make_job):
    jobs = [make_job(workflow="w") for _ in range(2)]
    make_job(workflow="other")

    assert run("prescient_pause", "--workflow", "w") == "Paused workflow 'w': 2 job(s) paused.\n"
    assert {state_of(job) for job in jobs} == {State.PAUSED}
    assert Workflow.objects.get(name="w").is_paused
    assert run("prescient_pause", "--workflow", "w") == "Paused workflow 'w': 0 job(s) paused.\n"

    assert run("prescient_release", "--workflow", "w") == "Released workflow 'w': 2 job(s) released.\n"
    assert {state_of(job) for job in jobs} == {State.SCHEDULED}
    assert run("prescient_release", "--workflow", "w") == "Released workflow 'w': 0 job(s) released.\n"
    assert FutureJob.objects.filter(state=State.SCHEDULED).count() == 3


def test_pause_and_release_one_job__by_id(make_job):
    job = make_job(workflow="w")
    assert run("prescient_pause", "--id", str(job.pk)) == f"Paused job {job.pk}.\n"
    assert run("prescient_pause", "--id", str(job.pk)) == f"Job {job.pk} was already paused.\n"
    assert state_of(job) == State.PAUSED
    assert run("prescient_release", "--id", str(job.pk)) == f"Released job {job.pk}.\n"
    assert run("prescient_release", "--id", str(job.pk)) == f"Job {job.pk} was not paused.\n"
    assert state_of(job) == State.SCHEDULED


def test_release_of_a_job_paused_mid_run__puts_it_back_to_running(make_job, t0):
    job = make_job(state=State.RUNNING, reserved_by="tick:1:x", reserved_at=t0)
    run("prescient_pause", "--id", str(job.pk))
    assert FutureJob.objects.filter(pk=job.pk).values_list("state", "last_state").get() == (State.PAUSED, State.RUNNING)
    run("prescient_release", "--id", str(job.pk))
    assert state_of(job) == State.RUNNING


@pytest.mark.parametrize("command", ["prescient_pause", "prescient_release"])
def test_pause_and_release__unknown_id_is_a_command_error(db, command):
    with pytest.raises(CommandError, match=re.escape("No live job with id 4242; it may have finished")):
        run(command, "--id", "4242")


@pytest.mark.parametrize("command", ["prescient_pause", "prescient_release"])
def test_pause_and_release__refused_transition_is_a_command_error(make_job, command):
    job = make_job(state=State.BURIED)
    event = command.removeprefix("prescient_")
    with pytest.raises(CommandError, match=re.escape(f"Job {job.pk} is buried: '{event}' is not allowed")):
        run(command, "--id", str(job.pk))
    assert state_of(job) == State.BURIED


@pytest.mark.parametrize("command", ["prescient_pause", "prescient_release"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "one of the arguments --workflow --id is required"),
        (("--workflow", "w", "--id", "1"), "argument --id: not allowed with argument --workflow"),
        (("--id", "zero"), "argument --id: must be a whole number from 1 to 9,223,372,036,854,775,807; got 'zero'"),
        (("--id", "0"), "argument --id: must be a whole number from 1 to 9,223,372,036,854,775,807; got '0'"),
        (("--workflow", "  "), "--workflow needs a name"),
    ],
)
def test_pause_and_release__bad_arguments_are_command_errors(make_job, command, args, message):
    job = make_job(workflow="w")
    with pytest.raises(CommandError, match=re.escape(message)):
        run(command, *args)
    assert state_of(job) == State.SCHEDULED
    assert not Workflow.objects.filter(paused_at__isnull=False).exists()


# --- prescient_kill -----------------------------------------------------------------------------


def test_kill__ends_a_waiting_job_with_its_reason(make_job):
    job = make_job(state=State.PAUSED, last_state=State.SCHEDULED)
    assert run("prescient_kill", "--id", str(job.pk), "--reason", "customer left") == f"Killed job {job.pk}.\n"
    assert not FutureJob.objects.exists()
    row = JobHistory.objects.get()
    assert (row.job_id, row.outcome, row.reason) == (job.pk, Outcome.KILLED, "customer left")


def test_kill__of_a_running_job_says_it_is_requested(make_job, t0):
    job = make_job(state=State.RUNNING, reserved_by="tick:1:x", reserved_at=t0)
    out = run("prescient_kill", "--id", str(job.pk), "--reason", "stuck")
    assert out.startswith(f"Kill of job {job.pk} requested: its run is in flight;")
    row = FutureJob.objects.get(pk=job.pk)
    assert (row.state, row.end_requested, row.end_reason) == (State.RUNNING, Outcome.KILLED, "stuck")
    assert not JobHistory.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--id", "4242", "--reason", "x"),
            "No live job with id 4242; it may have finished: see python manage.py prescient_history --job-id 4242",
        ),
        (("--id", "{pk}"), "the following arguments are required: --reason"),
        (("--reason", "x"), "the following arguments are required: --id"),
        (("--id", "{pk}", "--reason", "   "), "--reason must not be blank"),
        (("--id", "-3", "--reason", "x"), "argument --id: must be a whole number from 1 to 9,223,372,036,854,775,807"),
    ],
)
def test_kill__bad_input_is_a_command_error_and_changes_nothing(make_job, args, message):
    job = make_job()
    args = [arg.format(pk=job.pk) for arg in args]
    with pytest.raises(CommandError, match=re.escape(message)):
        run("prescient_kill", *args)
    assert state_of(job) == State.SCHEDULED
    assert not JobHistory.objects.exists()


def test_kill__of_a_finished_job_is_a_command_error(make_job):
    job = make_job()
    run("prescient_kill", "--id", str(job.pk), "--reason", "first")
    with pytest.raises(CommandError, match=f"No live job with id {job.pk}"):
        run("prescient_kill", "--id", str(job.pk), "--reason", "again")
    assert JobHistory.objects.count() == 1


# --- prescient_reap -----------------------------------------------------------------------------


def reaped(**counts):
    words = ("reclaimed", "handed_back", "buried", "slept", "ended")
    return "prescient reap: " + " ".join(f"{word}={counts.get(word, 0)}" for word in words) + "\n"


def test_reap__says_what_it_did_with_the_words_of_the_states_doc(make_job, clock, settings):
    """Reclaimed, handed back, buried, slept and ended are counted apart (#28 item 6): all were
    counted as ``buried``."""
    settings.PRESCIENT = {**settings.PRESCIENT, "MAX_RETRIES": 5}
    old = clock - timedelta(hours=1)
    make_job(state=State.RUNNING, reserved_by="worker:gone:1/1/1", reserved_at=old)  # reclaimed
    make_job(state=State.RESERVED, reserved_by="worker:gone:1/1/2", reserved_at=old, run_started_at=None)
    make_job(state=State.RUNNING, reserved_by="tick:1:gone", reserved_at=old)  # buried
    make_job(state=State.RUNNING, reserved_by="tick:1:gone", reserved_at=old, sleep_until=clock + timedelta(days=1))
    make_job(state=State.RUNNING, reserved_by="worker:gone:1/1/3", reserved_at=old, end_requested=Outcome.KILLED,
             end_reason="no longer wanted")
    assert run("prescient_reap") == reaped(reclaimed=1, handed_back=1, buried=1, slept=1, ended=1)
    assert FutureJob.objects.filter(state=State.BURIED).count() == 1
    assert JobHistory.objects.get().outcome == Outcome.KILLED


def test_reap__its_help_says_staleness_is_judged_by_the_database_clock():
    from prescient.management.commands.prescient_reap import Command

    parser = Command().create_parser("manage.py", "prescient_reap")
    now = next(action for action in parser._actions if "--now" in action.option_strings)
    assert "judged by the database's clock" in now.help and "as if it were" not in now.help
    assert "reclaimed" in Command.help and "buried" in Command.help and "handed back" in Command.help


def test_reap__buries_stale_reservations_and_prints_the_count(make_job, t0, clock):
    # Leases are judged by the database's clock; --now only dates what is written.
    stale = make_job(state=State.RUNNING, reserved_by="tick:1:lost", reserved_at=clock - timedelta(minutes=5))
    fresh = make_job(state=State.RUNNING, reserved_by="tick:2:alive", reserved_at=clock - timedelta(seconds=30))
    waiting = make_job(next_check_at=t0 - timedelta(hours=1))

    assert run("prescient_reap", "--now", T0_ISO) == reaped(buried=1)

    row = FutureJob.objects.get(pk=stale.pk)
    assert (row.state, row.reserved_by) == (State.BURIED, "")
    assert row.last_error.startswith("worker lost: reservation tick:1:lost")
    assert state_of(fresh) == State.RUNNING
    assert state_of(waiting) == State.SCHEDULED  # reaping runs nothing
    assert run("prescient_reap", "--now", T0_ISO) == reaped()


def test_reap__without_now_uses_the_real_time(make_job):
    now = timezone.now()
    lost = make_job(state=State.RUNNING, reserved_by="tick:1:lost", reserved_at=now - timedelta(days=1))
    alive = make_job(state=State.RUNNING, reserved_by="tick:2:alive", reserved_at=now)
    assert run("prescient_reap") == reaped(buried=1)
    assert (state_of(lost), state_of(alive)) == (State.BURIED, State.RUNNING)


def test_reap__a_future_now_takes_no_live_claim(make_job, clock):
    alive = make_job(state=State.RUNNING, reserved_by="worker:h:1/1", reserved_at=clock)
    assert run("prescient_reap", "--now", (clock + timedelta(days=30)).isoformat()) == reaped()
    assert state_of(alive) == State.RUNNING


@pytest.mark.parametrize(
    ("now", "message"),
    [
        ("yesterday", "'yesterday' is not an ISO 8601 date-time"),
        ("2026-11-22T10:00:00", "'2026-11-22T10:00:00' has no UTC offset"),
        ("2026-13-01T10:00:00+00:00", "is not an ISO 8601 date-time"),
    ],
)
def test_reap__bad_now_is_a_command_error(make_job, t0, now, message):
    job = make_job(state=State.RUNNING, reserved_by="tick:1:lost", reserved_at=t0 - timedelta(days=1))
    with pytest.raises(CommandError, match=re.escape(message)):
        run("prescient_reap", "--now", now)
    assert state_of(job) == State.RUNNING


@pytest.mark.slow
def test_commands__from_the_command_line_exit_non_zero_with_the_reason():
    process = manage("prescient_kill", "--id", "1")
    out, err = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "the following arguments are required: --reason" in err
    assert out == ""


# --- -v 0: reports of what was done are silent; the work is done all the same ----------------------


def test_verbosity_0__silences_every_report_but_does_the_work(make_job, make_thing, t0):
    def quiet(*args: str) -> tuple[str, str]:
        out, err = StringIO(), StringIO()
        call_command(*args, verbosity=0, stdout=out, stderr=err)
        return out.getvalue(), err.getvalue()

    due, doomed = make_job(next_check_at=t0), make_job()
    paused = make_job(workflow="w", next_check_at=t0 + timedelta(hours=1))
    assert quiet("prescient_pause", "--workflow", "w") == ("", "")
    assert state_of(paused) == State.PAUSED
    assert quiet("prescient_release", "--id", str(paused.pk)) == ("", "")
    assert state_of(paused) == State.SCHEDULED
    assert quiet("prescient_kill", "--id", str(doomed.pk), "--reason", "not needed") == ("", "")
    assert JobHistory.objects.get(job_id=doomed.pk).outcome == Outcome.KILLED
    assert quiet("prescient_reap", "--now", T0_ISO) == ("", "")
    assert quiet("prescient_tick", "--now", T0_ISO) == ("", "")
    assert JobHistory.objects.get(job_id=due.pk).outcome == Outcome.COMPLETED
    make_thing()
    assert quiet("prescient_backfill", "testapp.Thing", "test.record", "--delay-seconds", "3600") == ("", "")
    assert FutureJob.objects.filter(job_exec="test.record", state=State.SCHEDULED).count() > 1
    # Without -v 0 each of them reports (here the tick, as the rest is tested above).
    assert run("prescient_tick", "--now", T0_ISO).startswith("prescient tick: processed=0")
