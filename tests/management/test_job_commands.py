"""#27 item 4: every verb on the command line, selectable by id, entity, check, workflow or
state, with --dry-run, --json, examples in --help and a summary line."""

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command, load_command_class

import prescient
from prescient.models import FutureJob, JobHistory, Schedule, Workflow
from prescient.states import Outcome, State
from tests.conftest import manage

pytestmark = pytest.mark.django_db

T0_ISO = "2026-11-22T10:00:00+00:00"
HOUR = timedelta(hours=1)
VERBS = ["prescient_run_now", "prescient_sleep", "prescient_pause", "prescient_release", "prescient_kill",
         "prescient_cancel"]
NEW = [*VERBS, "prescient_jobs", "prescient_schedule", "prescient_schedules"]


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def run_json(*args):
    return json.loads(run(*args, "--json"))


def state_of(job):
    return FutureJob.objects.get(pk=job.pk).state


# --- selection and the summary ------------------------------------------------------------------


def test_pause__by_check_and_state_pauses_the_selected_jobs_and_sums_up(make_job):
    a, b = make_job("test.record"), make_job("test.record")
    other_check = make_job("test.slow")
    running = make_job("test.record", state=State.RUNNING, reserved_by="w", reserved_at=a.next_check_at)
    out = run("prescient_pause", "--check", "test.record", "--state", "scheduled")
    assert out.splitlines() == [
        f"job {a.pk} test.record testapp.thing:{a.entity_key}: scheduled -> paused",
        f"job {b.pk} test.record testapp.thing:{b.entity_key}: scheduled -> paused",
        "Paused 2 job(s); 0 unchanged; 0 refused; 2 selected.",
    ]
    assert [state_of(j) for j in (a, b, other_check, running)] == [
        State.PAUSED, State.PAUSED, State.SCHEDULED, State.RUNNING
    ]


def test_bulk__a_refused_job_is_counted_and_the_others_go_on(make_job, t0):
    scheduled, buried = make_job(), make_job(state=State.BURIED)
    out = run("prescient_pause", "--check", "test.record", "--now", T0_ISO)
    assert f"job {buried.pk} test.record testapp.thing:{buried.entity_key}: refused: Job {buried.pk} is buried" in out
    assert out.splitlines()[-1] == "Paused 1 job(s); 0 unchanged; 1 refused; 2 selected."
    assert (state_of(scheduled), state_of(buried)) == (State.PAUSED, State.BURIED)


def test_dry_run__says_what_would_change_and_changes_nothing(make_job):
    scheduled, paused = make_job(), make_job(state=State.PAUSED, last_state=State.SCHEDULED)
    buried = make_job(state=State.BURIED)
    out = run("prescient_pause", "--check", "test.record", "--dry-run")
    assert out.splitlines() == [
        f"job {scheduled.pk} test.record testapp.thing:{scheduled.entity_key}: scheduled -> paused (would change)",
        f"job {paused.pk} test.record testapp.thing:{paused.entity_key}: paused, would not change",
        (
            f"job {buried.pk} test.record testapp.thing:{buried.entity_key}: refused: "
            f"Job {buried.pk} is buried: 'pause' is not allowed"
        ),
        "Would pause 1 job(s); 1 unchanged; 1 refused; 3 selected.",
    ]
    assert [state_of(j) for j in (scheduled, paused, buried)] == [State.SCHEDULED, State.PAUSED, State.BURIED]


def test_dry_run__of_a_whole_workflow_pauses_neither_it_nor_its_jobs(make_job):
    job = make_job(workflow="w")
    data = run_json("prescient_pause", "--workflow", "w", "--dry-run")
    assert data["summary"] == {"would change": 1}
    assert state_of(job) == State.SCHEDULED
    assert not Workflow.objects.filter(paused_at__isnull=False).exists()


def test_json__gives_every_job_and_the_counts(make_job):
    job, buried = make_job(workflow="w"), make_job(workflow="w", state=State.BURIED)
    data = run_json("prescient_release", "--workflow", "w", "--state", "buried")
    assert data["verb"] == "release" and data["dry_run"] is False
    assert data["jobs"] == [{
        "id": buried.pk, "entity": f"testapp.thing:{buried.entity_key}", "check": "test.record", "workflow": "w",
        "state": "buried", "to": "", "result": "refused",
        "detail": f"Job {buried.pk} is buried: 'release' is not allowed",
    }]
    assert data["summary"] == {"refused": 1}
    assert state_of(job) == State.SCHEDULED


def test_entity__selects_the_jobs_of_one_entity_only(make_job, make_thing):
    thing = make_thing()
    mine = [make_job("test.record", thing=thing), make_job("test.slow", thing=thing)]
    theirs = make_job("test.record")
    out = run("prescient_cancel", "--entity", f"testapp.Thing:{thing.pk}", "--now", T0_ISO)
    assert out.splitlines()[-1] == "Cancelled 2 job(s); 0 unchanged; 0 refused; 2 selected."
    assert set(JobHistory.objects.values_list("job_id", "outcome")) == {(j.pk, Outcome.CANCELLED) for j in mine}
    assert state_of(theirs) == State.SCHEDULED


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "select jobs: give --id, --workflow, --entity, --check or --state"),
        (("--entity", "thing-3"), "'thing-3' is not app_label.model:pk"),
        (("--entity", "testapp.thin:3"), "Unknown model 'testapp.thin'. Did you mean 'testapp.thing'"),
        (("--check", "test.recrod"), "Unknown check 'test.recrod'. Did you mean 'test.record'?"),
        (("--workflow", "ordrs"), "Unknown workflow 'ordrs'. Did you mean 'orders'?"),
        (("--state", "sleeping"), "argument --state: invalid choice: 'sleeping'"),
        (("--id", "4242"), "No live job with id 4242"),
        (("--id", "1", "--workflow", "w"), "argument --workflow: not allowed with argument --id"),
    ],
)
def test_selection__bad_or_unknown_is_a_command_error_and_changes_nothing(make_job, args, message):
    job = make_job(workflow="orders")
    with pytest.raises(CommandError, match=re.escape(message)):
        run("prescient_run_now", *args)
    assert FutureJob.objects.get(pk=job.pk).next_check_at == job.next_check_at


@pytest.mark.parametrize("state", [s.value for s in State])
def test_state__every_state_of_the_enum_can_be_selected(make_job, state):
    make_job(state=state, last_state=State.SCHEDULED if state == State.PAUSED else "")
    data = run_json("prescient_kill", "--state", state, "--reason", "r", "--dry-run")
    assert [row["state"] for row in data["jobs"]] == [state]


# --- each verb ----------------------------------------------------------------------------------


def test_run_now__makes_a_buried_job_due_at_now(make_job, t0):
    job = make_job(state=State.BURIED, next_check_at=t0 + 5 * HOUR)
    out = run("prescient_run_now", "--state", "buried", "--now", T0_ISO)
    assert out.splitlines()[-1] == "Made due now 1 job(s); 0 unchanged; 0 refused; 1 selected."
    row = FutureJob.objects.get(pk=job.pk)
    assert (row.state, row.next_check_at) == (State.SCHEDULED, t0)


def test_run_now__one_job_refused_is_the_commands_error(make_job, t0):
    job = make_job(state=State.WAITING)
    with pytest.raises(CommandError, match=re.escape(f"Job {job.pk} is waiting: 'run_now' is not allowed")):
        run("prescient_run_now", "--id", str(job.pk))


def test_sleep__moves_the_next_check_rounded_up_to_a_slot(make_job, t0):
    jobs = [make_job(workflow="w"), make_job(workflow="w")]
    until = (t0 + 2 * HOUR + timedelta(minutes=1)).isoformat()
    out = run("prescient_sleep", "--workflow", "w", "--until", until, "--now", T0_ISO)
    assert out.splitlines()[-1] == "Slept 2 job(s); 0 unchanged; 0 refused; 2 selected."
    assert {FutureJob.objects.get(pk=j.pk).next_check_at for j in jobs} == {t0 + 2 * HOUR + timedelta(minutes=15)}
    with pytest.raises(CommandError, match="the following arguments are required: --until"):
        run("prescient_sleep", "--workflow", "w")


def test_kill__many_by_workflow_with_a_run_in_flight_requested(make_job, t0):
    waiting = make_job(workflow="w")
    running = make_job(workflow="w", state=State.RUNNING, reserved_by="tick:1:x", reserved_at=t0)
    out = run("prescient_kill", "--workflow", "w", "--reason", "order gone", "--now", T0_ISO)
    assert out.splitlines()[-1] == "Killed 1 job(s); 1 requested (runs in flight); 0 unchanged; 0 refused; 2 selected."
    assert JobHistory.objects.get(job_id=waiting.pk).reason == "order gone"
    assert FutureJob.objects.get(pk=running.pk).end_requested == Outcome.KILLED


def test_cancel__one_job_by_id(make_job):
    job = make_job()
    out = run("prescient_cancel", "--id", str(job.pk))
    assert out.splitlines() == [
        f"job {job.pk} test.record testapp.thing:{job.entity_key}: scheduled -> cancelled",
    ]  # one job asked for by id: its line, no summary
    assert JobHistory.objects.get(job_id=job.pk).outcome == Outcome.CANCELLED


# --- listing ------------------------------------------------------------------------------------


def test_jobs__lists_the_jobs_of_an_entity(make_job, make_thing):
    thing = make_thing()
    mine = [make_job("test.record", thing=thing), make_job("test.slow", thing=thing, workflow="w")]
    make_job("test.record")
    out = run("prescient_jobs", "--entity", f"testapp.thing:{thing.pk}")
    lines = out.splitlines()
    assert [int(line.split()[0]) for line in lines[:-1]] == [j.pk for j in mine]
    assert "workflow=w" in lines[1]
    assert lines[-1] == "2 job(s) shown of 2 selected."
    rows = [json.loads(line) for line in run("prescient_jobs", "--check", "test.slow", "--json").splitlines()]
    assert [(r["id"], r["state"], r["workflow"]) for r in rows] == [(mine[1].pk, "scheduled", "w")]
    assert run("prescient_jobs", "--limit", "1").splitlines()[-1] == "1 job(s) shown of 3 selected."


# --- scheduling ---------------------------------------------------------------------------------


def test_schedule__one_check_for_one_entity_then_keeps_it(make_thing, t0):
    thing = make_thing()
    args = ("prescient_schedule", "--check", "test.record", "--entity", f"testapp.thing:{thing.pk}")
    dry = run(*args, "--delay-seconds", "3600", "--now", T0_ISO, "--dry-run")
    assert dry == f"Would schedule test.record testapp.thing:{thing.pk}, due {(t0 + HOUR).isoformat()}.\n"
    assert not FutureJob.objects.exists()
    out = run(*args, "--delay-seconds", "3600", "--now", T0_ISO)
    job = FutureJob.objects.get()
    due = (t0 + HOUR).isoformat()
    assert out == f"Scheduled job {job.pk}: test.record testapp.thing:{thing.pk}, due {due} (scheduled).\n"
    again = run_json(*args, "--now", T0_ISO)
    assert (again["id"], again["created"]) == (job.pk, False)


def test_schedule_replace__says_it_moved_the_pending_job_and_from_when(make_thing, t0):
    thing = make_thing()
    args = ("prescient_schedule", "--check", "test.record", "--entity", f"testapp.thing:{thing.pk}", "--now", T0_ISO)
    run(*args, "--delay-seconds", "3600")
    job = FutureJob.objects.get()
    before, after = (t0 + HOUR).isoformat(), (t0 + 3 * HOUR).isoformat()
    out = run(*args, "--delay-seconds", str(3 * 3600), "--replace")
    assert out == f"Moved job {job.pk} (test.record testapp.thing:{thing.pk}) from {before} to {after}.\n"
    assert FutureJob.objects.get().next_check_at == t0 + 3 * HOUR
    # the same time again: nothing moved, and it says why
    out = run(*args, "--delay-seconds", str(3 * 3600), "--replace")
    assert out == (f"Job {job.pk} was already pending: test.record testapp.thing:{thing.pk}, due {after} "
                   "(--replace: already due then, not moved).\n")
    # without --replace: kept, as before
    out = run(*args, "--delay-seconds", "60")
    assert out == f"Job {job.pk} was already pending: test.record testapp.thing:{thing.pk}, due {after}.\n"


def test_schedule_replace_json__carries_moved_from(make_thing, t0):
    thing = make_thing()
    args = ("prescient_schedule", "--check", "test.record", "--entity", f"testapp.thing:{thing.pk}", "--now", T0_ISO)
    first = run_json(*args, "--delay-seconds", "3600")
    assert (first["created"], first["result"], first["moved_from"]) == (True, "created", None)
    moved = run_json(*args, "--delay-seconds", "7200", "--replace")
    assert (moved["created"], moved["result"]) == (False, "moved")
    assert moved["moved_from"] == (t0 + HOUR).isoformat() and moved["next_check_at"] == (t0 + 2 * HOUR).isoformat()
    kept = run_json(*args, "--delay-seconds", "7200", "--replace")
    assert (kept["result"], kept["moved_from"]) == ("kept", None)


def test_schedule__a_new_workflow_needs_create(make_thing, t0):
    thing = make_thing()
    args = ("prescient_schedule", "--check", "test.record", "--entity", f"testapp.thing:{thing.pk}", "--now", T0_ISO)
    with pytest.raises(CommandError, match=re.escape("Unknown workflow 'order-42'")):
        run(*args, "--workflow", "order-42")
    assert not FutureJob.objects.exists()
    run(*args, "--workflow", "order-42", "--create")
    assert FutureJob.objects.get().workflow == "order-42"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--check", "test.recrod", "--entity", "testapp.thing:{pk}"), "Did you mean 'test.record'?"),
        (("--check", "test.record", "--entity", "testapp.thing:999999"), "No testapp.thing with pk '999999'"),
        (("--check", "test.record", "--entity", "testapp.thing:{pk}", "--create"), "--create makes a workflow"),
    ],
)
def test_schedule__bad_input_is_a_command_error(make_thing, args, message):
    thing = make_thing()
    with pytest.raises(CommandError, match=re.escape(message)):
        run("prescient_schedule", *[a.format(pk=thing.pk) for a in args])
    assert not FutureJob.objects.exists()


# --- recurring schedules ------------------------------------------------------------------------


def test_schedules__pause_and_resume_by_name_with_a_dry_run(make_thing, t0):
    for name in ("billing.a", "billing.b"):
        prescient.recurring(name, check="test.record", entity=make_thing(), cron="0 9 * * *", now=t0)
    assert run("prescient_schedules", "--pause", "billing.a", "--dry-run").splitlines() == [
        "billing.a: would be paused", "Would change 1 schedule(s); 0 unchanged.",
    ]
    assert not Schedule.objects.filter(paused_at__isnull=False).exists()
    out = run("prescient_schedules", "--pause", "billing.a", "--pause", "billing.b", "--now", T0_ISO)
    assert out.splitlines()[-1] == "Changed 2 schedule(s); 0 unchanged."
    assert Schedule.objects.filter(paused_at__isnull=False).count() == 2
    rows = [json.loads(line) for line in run("prescient_schedules", "--resume", "billing.a", "--json").splitlines()]
    assert rows == [{"name": "billing.a", "verb": "resume", "changed": True, "dry_run": False}]
    expected = "No schedule named 'billing.c'. Did you mean 'billing.b' or 'billing.a'?"
    with pytest.raises(CommandError, match=re.escape(expected)):
        run("prescient_schedules", "--resume", "billing.b", "--resume", "billing.c")
    assert Schedule.objects.get(name="billing.b").is_paused  # nothing changed: the typo was found first


# --- help and exit status -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW)
def test_help__ends_with_examples(name):
    text = load_command_class("prescient", name).create_parser("manage.py", name).format_help()
    assert "examples:\n  python manage.py " + name in text


@pytest.mark.django_db(transaction=True)  # no transaction held open: the child reads the database
def test_run_now__from_the_command_line_an_unknown_id_exits_1():
    process = manage("prescient_run_now", "--id", "4242")
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out) == (1, "")
    assert err.strip().splitlines() == [
        ("CommandError: No live job with id 4242; it may have finished: "
        "see python manage.py prescient_history --job-id 4242")
    ]


def test_verbosity_0__silences_the_report_but_not_a_dry_run_or_a_listing(make_job):
    job = make_job()

    def quiet(*args):
        out = StringIO()
        call_command(*args, verbosity=0, stdout=out)
        return out.getvalue()

    assert quiet("prescient_pause", "--check", "test.record", "--dry-run").endswith("1 selected.\n")
    assert quiet("prescient_jobs").endswith("1 job(s) shown of 1 selected.\n")
    assert quiet("prescient_pause", "--check", "test.record") == ""
    assert state_of(job) == State.PAUSED
