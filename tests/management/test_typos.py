"""#27 item 2: an unknown check, schedule or workflow name is an error naming the closest known
names; making a new workflow on purpose takes --create / create_workflow=True."""

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import prescient
from prescient.engine import recurring
from prescient.models import FutureJob, Workflow
from prescient.states import State
from tests.conftest import manage

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_pause__an_unknown_workflow_is_an_error_naming_the_closest_and_creates_nothing(make_job):
    job = make_job(workflow="orders")
    with pytest.raises(CommandError, match=re.escape("Unknown workflow 'ordres'. Did you mean 'orders'?")):
        run("prescient_pause", "--workflow", "ordres")
    with pytest.raises(CommandError, match=re.escape("Unknown workflow 'nope'. No job or schedule uses it.")):
        run("prescient_pause", "--workflow", "nope")
    assert not Workflow.objects.filter(name__in=["ordres", "nope"]).exists()
    assert FutureJob.objects.get(pk=job.pk).state == State.SCHEDULED


def test_release__an_unknown_workflow_is_an_error(make_job):
    make_job(workflow="orders")
    with pytest.raises(CommandError, match=re.escape("Unknown workflow 'order'. Did you mean 'orders'?")):
        run("prescient_release", "--workflow", "order")
    assert not Workflow.objects.filter(name="order").exists()


def test_pause__with_create_makes_a_paused_workflow_its_new_jobs_start_in(make_thing, t0):
    assert run("prescient_pause", "--workflow", "later", "--create") == "Paused workflow 'later': 0 job(s) paused.\n"
    assert Workflow.objects.get(name="later").is_paused
    job = prescient.schedule(make_thing(), "test.record", workflow="later", now=t0)
    assert job.state == State.PAUSED
    # Known now: no --create needed again.
    assert run("prescient_release", "--workflow", "later") == "Released workflow 'later': 1 job(s) released.\n"


def test_backfill__into_an_unknown_workflow_needs_create(make_thing):
    make_thing()
    with pytest.raises(CommandError, match=re.escape("Unknown workflow 'w1'")):
        run("prescient_backfill", "testapp.Thing", "test.record", "--workflow", "w1")
    assert not FutureJob.objects.exists()
    run("prescient_backfill", "testapp.Thing", "test.record", "--workflow", "w1", "--create")
    assert set(FutureJob.objects.values_list("workflow", flat=True)) == {"w1"}
    with pytest.raises(CommandError, match="--create makes a workflow"):
        run("prescient_backfill", "testapp.Thing", "test.record", "--create")


def test_pause__create_needs_a_workflow(make_job):
    job = make_job()
    with pytest.raises(CommandError, match="--create makes a workflow: give it with --workflow"):
        run("prescient_pause", "--id", str(job.pk), "--create")
    assert FutureJob.objects.get(pk=job.pk).state == State.SCHEDULED


def test_pause__a_workflow_known_only_from_a_schedule_needs_no_create(make_thing, t0):
    recurring_row = prescient.recurring(
        "nightly", check="test.record", entity=make_thing(), cron="0 2 * * *", workflow="night", now=t0
    )
    assert recurring_row.workflow == "night"
    assert run("prescient_pause", "--workflow", "night") == "Paused workflow 'night': 0 job(s) paused.\n"


def test_python_api__pause_and_release_of_an_unknown_workflow_raise_with_suggestions(make_job, t0):
    make_job(workflow="batch-7")
    with pytest.raises(prescient.UnknownWorkflow) as caught:
        prescient.pause(workflow="batch-8", now=t0)
    assert caught.value.suggestions == ["batch-7"]
    with pytest.raises(prescient.UnknownWorkflow, match="create_workflow=True"):
        prescient.release(workflow="batch-8", now=t0)
    assert prescient.pause(workflow="batch-8", create_workflow=True, now=t0) == 0
    assert FutureJob.objects.get(workflow="batch-7").state == State.SCHEDULED  # the typo paused nothing


def test_unknown_check__names_the_closest_registered_ones(make_thing, t0):
    expected = "Unknown check 'test.recrod'. Did you mean 'test.record'?"
    with pytest.raises(prescient.UnknownCheck, match=re.escape(expected)):
        prescient.schedule(make_thing(), "test.recrod", now=t0)
    with pytest.raises(prescient.UnknownCheck, match=re.escape("Register it with @prescient.check('zzz'")):
        prescient.get_check("zzz")  # nothing close: how to register one instead
    with pytest.raises(CommandError, match=re.escape("Did you mean 'test.record'")):
        run("prescient_backfill", "testapp.Thing", "test.recrod")
    assert not FutureJob.objects.exists()


def test_unknown_schedule__names_the_closest_schedules(make_thing, t0):
    prescient.recurring("billing.remind", check="test.record", entity=make_thing(), cron="0 9 * * *", now=t0)
    expected = "No schedule named 'billing.remid'. Did you mean 'billing.remind'?"
    with pytest.raises(recurring.ScheduleNotFound, match=re.escape(expected)):
        recurring.pause("billing.remid", now=t0)


@pytest.mark.django_db(transaction=True)  # no transaction held open: the child reads the database
def test_pause__from_the_command_line_exits_1_with_one_line():
    process = manage("prescient_pause", "--workflow", "nope")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert out == ""
    assert err.strip().splitlines() == [(
        "CommandError: Unknown workflow 'nope'. No job or schedule uses it. To make a new workflow on purpose, "
        "pass create_workflow=True (--create on the command line)."
    )]
