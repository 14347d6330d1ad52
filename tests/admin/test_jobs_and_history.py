"""The admin: pages render, actions go through the services, view-only users change nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import WARNING, get_messages
from django.test import Client
from django.urls import path
from django.utils import timezone

import prescient
from prescient.admin.actions import MAX_SKIP_MESSAGES
from prescient.admin.history import JobHistoryAdmin
from prescient.admin.jobs import FutureJobAdmin
from prescient.admin.workflows import WorkflowAdmin
from prescient.models import FutureJob, JobHistory, Workflow
from prescient.states import Outcome, State
from tests.testapp.models import Thing

# A second admin site that also registers Thing, for the entity links (used with
# @pytest.mark.urls("tests.admin.test_jobs_and_history")).
entity_site = admin.AdminSite(name="entity_admin")
entity_site.register(FutureJob, FutureJobAdmin)
entity_site.register(JobHistory, JobHistoryAdmin)
entity_site.register(Workflow, WorkflowAdmin)
entity_site.register(Thing)
urlpatterns = [path("entity-admin/", entity_site.urls)]

CHANGELIST = "/admin/prescient/futurejob/"
IN_FLIGHT = {"reserved_by": "tick:1:abc", "reserved_at": timezone.now()}


def change_url(obj: Any) -> str:
    return f"/admin/prescient/{obj._meta.model_name}/{obj.pk}/change/"


def act(client: Client, action: str, *objs: Any, url: str = CHANGELIST, **extra: str) -> Any:
    """POST an action from the changelist, as its form does, and follow the redirect."""
    data = {"action": action, "index": "0", "_selected_action": [str(o.pk) for o in objs], **extra}
    return client.post(url, data, follow=True)


def texts(response: Any, level: int | None = None) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request) if level is None or m.level == level]


def reload(job: FutureJob) -> FutureJob | None:
    return FutureJob.objects.filter(pk=job.pk).first()


@pytest.fixture
def jobs(make_job, make_thing, t0) -> dict[str, FutureJob]:
    return {
        "scheduled": make_job(workflow="wf"),
        "running": make_job(state=State.RUNNING, **IN_FLIGHT),
        "paused": make_job(state=State.PAUSED, last_state=State.SCHEDULED, workflow="wf"),
        "buried": make_job(
            state=State.BURIED,
            last_error="worker lost",
            recent_errors=[{"at": t0.isoformat(), "error": "worker lost"}],
        ),
    }


@pytest.fixture
def viewer(db) -> Client:
    """A staff user with only the view permissions of prescient's models."""
    user = User.objects.create_user("viewer", password="not-used", is_staff=True)
    views = Permission.objects.filter(content_type__app_label="prescient", codename__startswith="view_")
    user.user_permissions.set(views)
    client = Client()
    client.force_login(user)
    return client


# --- pages ---------------------------------------------------------------------------------------


def test_changelists__render_with_jobs_history_and_workflows(admin_client, jobs, t0):
    prescient.kill(jobs["buried"], "stuck for good", now=t0)
    prescient.pause(workflow="wf", now=t0)
    for url in (CHANGELIST, "/admin/prescient/jobhistory/", "/admin/prescient/workflow/"):
        response = admin_client.get(url)
        assert response.status_code == 200, url
    assert "run in flight for" in admin_client.get(CHANGELIST).content.decode()
    response = admin_client.get("/admin/prescient/workflow/")
    assert b"wf" in response.content


def test_job_changelist__shows_state_overdue_and_checks_used(admin_client, make_job, register, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "MAX_CHECKS": 7}
    register("test.twice", lambda thing, job: None, max_checks=2)
    make_job("test.twice", check_count=1, next_check_at=timezone.now() - timedelta(hours=2))
    make_job("gone.check", next_check_at=timezone.now() + timedelta(days=2))
    content = admin_client.get(CHANGELIST).content.decode()
    assert "1 / 2" in content  # the check's own max_checks
    assert "0 / 7" in content  # an unregistered check: the MAX_CHECKS setting
    assert "overdue by" in content
    assert "Scheduled</span>" in content


def test_job_changelist__a_reserved_job_has_its_badge_and_its_filter(admin_client, make_job):
    reserved = make_job(state=State.RESERVED, reserved_by="worker:w/1/1", reserved_at=timezone.now())
    make_job()
    content = admin_client.get(CHANGELIST).content.decode()
    assert "Reserved</span>" in content
    assert "?state__exact=reserved" in content, "the state filter offers reserved"
    filtered = admin_client.get(CHANGELIST, {"state__exact": "reserved"})
    assert [job.pk for job in filtered.context["cl"].result_list] == [reserved.pk]


def test_job_changelist__a_paused_job_past_its_time_is_paused_not_overdue(admin_client, make_job):
    make_job(state=State.PAUSED, last_state=State.SCHEDULED, next_check_at=timezone.now() - timedelta(hours=2))
    content = admin_client.get(CHANGELIST).content.decode()
    assert "overdue by" not in content
    assert '<small class="quiet">paused</small>' in content
    make_job(next_check_at=timezone.now() - timedelta(hours=2))  # a scheduled one is overdue
    assert "overdue by" in admin_client.get(CHANGELIST).content.decode()


@pytest.mark.parametrize(
    "url",
    [CHANGELIST, "/admin/prescient/jobhistory/", "/admin/prescient/workflow/", "/admin/prescient/worker/"],
)
def test_changelists__offer_show_all_only_when_a_filter_or_search_narrows_them(admin_client, jobs, t0, url):
    prescient.kill(jobs["buried"], "stuck for good", now=t0)
    prescient.pause(workflow="wf", now=t0)
    assert "Show all" not in admin_client.get(url).content.decode()
    assert "Show all" in admin_client.get(url, {"q": "no-such-key"}).content.decode()
    if url == CHANGELIST:
        assert "Show all" in admin_client.get(url, {"state__exact": "paused"}).content.decode()
        assert "Show all" not in admin_client.get(url, {"o": "2"}).content.decode()  # a sort filters nothing


def test_job_changelist__entity_is_plain_text_when_its_model_is_not_registered(admin_client, make_job):
    job = make_job()
    content = admin_client.get(CHANGELIST).content.decode()
    assert f"testapp.thing:{job.entity_key}" in content
    assert "/admin/testapp/thing/" not in content


@pytest.mark.urls("tests.admin.test_jobs_and_history")
def test_entity__links_to_its_admin_page_on_the_same_site(admin_client, make_job, t0):
    job = make_job()
    prescient.kill(make_job(thing=Thing.objects.get(pk=job.entity_key), check="test.slow"), "done", now=t0)
    link = f'<a href="/entity-admin/testapp/thing/{job.entity_key}/change/">testapp.thing:{job.entity_key}</a>'
    assert link in admin_client.get("/entity-admin/prescient/futurejob/").content.decode()
    assert link in admin_client.get("/entity-admin/prescient/jobhistory/").content.decode()
    assert link in admin_client.get(f"/entity-admin/prescient/futurejob/{job.pk}/change/").content.decode()


def test_job_change_page__is_read_only_with_errors_and_history(admin_client, jobs, t0):
    job = jobs["buried"]
    earlier = JobHistory.from_job(job, Outcome.CANCELLED, t0 - timedelta(days=1), reason="an earlier one")
    earlier.save()
    response = admin_client.get(change_url(job))
    assert response.status_code == 200
    content = response.content.decode()
    assert "an earlier one" in content  # the history table
    assert "worker lost" in content  # last error and the recent errors table
    assert 'name="_save"' not in content
    history = admin_client.get(
        "/admin/prescient/jobhistory/",
        {"entity_name": job.entity_name, "entity_key": job.entity_key, "job_exec": job.job_exec},
    )
    assert [row.pk for row in history.context["cl"].result_list] == [earlier.pk]
    assert b"No earlier jobs" in admin_client.get(change_url(jobs["scheduled"])).content


def test_job_change_page__refuses_a_post_and_there_is_no_add_or_delete(admin_client, jobs):
    job = jobs["scheduled"]
    assert admin_client.post(change_url(job), {"state": State.BURIED}).status_code == 403
    assert admin_client.get(CHANGELIST + "add/").status_code == 403
    assert admin_client.post(f"{CHANGELIST}{job.pk}/delete/", {"post": "yes"}).status_code == 403
    assert reload(job).state == State.SCHEDULED


def test_history_and_workflow_pages__render(admin_client, jobs, t0):
    prescient.kill(jobs["scheduled"], "not needed", now=t0)
    row = JobHistory.objects.get()
    response = admin_client.get(change_url(row))
    assert response.status_code == 200
    assert b"not needed" in response.content
    workflow = Workflow.objects.create(name="wf")
    response = admin_client.get(f"/admin/prescient/workflow/{workflow.pk}/change/")
    assert response.status_code == 200


def test_history__is_named_finished_jobs_in_the_singular_and_plural(admin_client, jobs, t0):
    for job in (jobs["scheduled"], jobs["paused"]):
        prescient.kill(job, "not needed", now=t0)
    content = admin_client.get("/admin/prescient/jobhistory/").content.decode()
    assert "<h1>Finished jobs</h1>" in content
    assert "2 finished jobs" in content  # the action bar's count ("0 of 2 selected" names them)
    assert "job history" not in content.lower().replace("prescient/jobhistory", "")
    assert "Finished jobs" in admin_client.get("/admin/").content.decode()


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("overdue", {"overdue", "slot_start"}),
        ("slot", {"this_slot"}),
        ("today", {"today"}),
        ("later", {"later"}),
    ],
)
def test_due_filter__splits_jobs_by_slot_and_day(admin_client, make_job, monkeypatch, t0, choice, expected):
    now = t0 + timedelta(minutes=5)  # 10:05 UTC; the slot ends at 10:15
    made = {
        "overdue": make_job(next_check_at=t0 - timedelta(hours=1)),
        "slot_start": make_job(next_check_at=t0),
        "this_slot": make_job(next_check_at=t0 + timedelta(minutes=15)),
        "today": make_job(next_check_at=t0 + timedelta(hours=4)),
        "later": make_job(next_check_at=t0 + timedelta(days=1)),
        "running": make_job(state=State.RUNNING, next_check_at=t0 - timedelta(hours=1), **IN_FLIGHT),
    }
    # The admin asks for the real time: give it a fixed one for this request.
    monkeypatch.setattr(timezone, "now", lambda: now)
    response = admin_client.get(CHANGELIST, {"due": choice})
    assert response.status_code == 200
    shown = {job.pk for job in response.context["cl"].result_list}
    assert shown == {made[name].pk for name in expected}


# --- job actions -------------------------------------------------------------------------------


def test_pause_and_release__go_through_the_services_and_are_logged(admin_client, jobs):
    job = jobs["scheduled"]
    response = act(admin_client, "pause_jobs", job)
    assert response.status_code == 200
    assert reload(job).state == State.PAUSED
    assert "Paused 1 job." in texts(response)
    assert LogEntry.objects.filter(object_id=str(job.pk), action_flag=CHANGE).count() == 1

    response = act(admin_client, "release_jobs", job)
    assert reload(job).state == State.SCHEDULED
    assert "Released 1 job." in texts(response)
    assert LogEntry.objects.filter(object_id=str(job.pk), action_flag=CHANGE).count() == 2


def test_pause__of_a_paused_job_is_reported_as_unchanged(admin_client, jobs):
    response = act(admin_client, "pause_jobs", jobs["paused"])
    assert "1 job was paused already." in texts(response)
    assert not LogEntry.objects.exists()


def test_run_now__makes_a_buried_job_due(admin_client, jobs, t0):
    job = jobs["buried"]
    before = timezone.now()
    response = act(admin_client, "run_jobs_now", job)
    job = reload(job)
    assert job.state == State.SCHEDULED
    assert before <= job.next_check_at <= timezone.now()
    assert "1 job is due now." in texts(response)


def test_run_now__releases_a_paused_job_and_makes_it_due(admin_client, jobs):
    job = jobs["paused"]
    before = timezone.now()
    response = act(admin_client, "run_jobs_now", job)
    job = reload(job)
    assert (job.state, job.last_state) == (State.SCHEDULED, "")
    assert before <= job.next_check_at <= timezone.now()
    assert "1 job is due now." in texts(response)


def test_sleep__asks_for_a_time_then_moves_each_next_check(admin_client, jobs):
    selected = [jobs["scheduled"], jobs["paused"], jobs["running"]]
    response = act(admin_client, "sleep_jobs", *selected)
    assert "prescient/admin/sleep_confirmation.html" in [t.name for t in response.templates]
    assert "csrfmiddlewaretoken" in response.content.decode()
    confirm = {"action": "sleep_jobs", "_selected_action": [str(j.pk) for j in selected], "post": "yes"}
    response = admin_client.post(CHANGELIST, {**confirm, "at": "not a time"})
    assert response.status_code == 200 and response.context["form"].errors["at"]
    at = (timezone.now() + timedelta(days=2)).replace(minute=7, second=0, microsecond=0)
    response = admin_client.post(CHANGELIST, {**confirm, "at": at.strftime("%Y-%m-%d %H:%M")}, follow=True)
    slot = at.replace(minute=15)
    assert (reload(jobs["scheduled"]).state, reload(jobs["scheduled"]).next_check_at) == (State.SCHEDULED, slot)
    assert (reload(jobs["paused"]).state, reload(jobs["paused"]).next_check_at) == (State.PAUSED, slot)
    running = reload(jobs["running"])
    assert (running.state, running.sleep_until) == (State.RUNNING, slot)
    named = slot.strftime("%-d %b %Y %H:%M") + " (UTC)"
    assert f"2 jobs sleep until {named}." in texts(response)
    assert f"1 job is running: it is asked to stop, and sleeps until {named} once its run returns." in texts(response)
    assert LogEntry.objects.count() == 3


def test_sleep__beyond_the_horizon_is_skipped_with_the_reason(admin_client, jobs):
    job = jobs["scheduled"]
    at = timezone.now() + timedelta(days=400)
    response = admin_client.post(
        CHANGELIST, {"action": "sleep_jobs", "_selected_action": [str(job.pk)], "post": "yes",
                     "at": at.strftime("%Y-%m-%d %H:%M")}, follow=True,
    )
    assert any("beyond the horizon" in text for text in texts(response, WARNING))
    assert reload(job).next_check_at != at


@pytest.mark.parametrize(
    ("action", "state"),
    [
        ("run_jobs_now", "running"),
        ("pause_jobs", "buried"),
        ("release_jobs", "buried"),
    ],
)
def test_refused_action__warns_and_changes_nothing(admin_client, jobs, action, state):
    job = jobs[state]
    before = FutureJob.objects.values().get(pk=job.pk)
    response = act(admin_client, action, job)
    assert response.status_code == 200
    warnings = texts(response, WARNING)
    assert len(warnings) == 1
    assert f"Skipped job {job.pk}" in warnings[0]
    assert f"Job {job.pk} is {state}" in warnings[0]
    assert FutureJob.objects.values().get(pk=job.pk) == before
    assert not LogEntry.objects.exists()


def test_action__on_a_mixed_selection_reports_each_refusal(admin_client, jobs):
    response = act(admin_client, "pause_jobs", jobs["scheduled"], jobs["buried"], jobs["running"])
    assert reload(jobs["scheduled"]).state == State.PAUSED
    assert reload(jobs["running"]).state == State.PAUSED
    assert reload(jobs["buried"]).state == State.BURIED
    assert "Paused 2 jobs." in texts(response)
    assert [m for m in texts(response, WARNING) if f"job {jobs['buried'].pk}" in m]


def test_action__caps_the_skip_messages_on_a_large_selection(admin_client, make_job):
    buried = [make_job(state=State.BURIED) for _ in range(MAX_SKIP_MESSAGES + 2)]
    warnings = texts(act(admin_client, "pause_jobs", *buried), WARNING)
    assert len(warnings) == MAX_SKIP_MESSAGES + 1
    assert warnings[-1] == "…and 2 more jobs skipped."


def test_kill__asks_for_a_reason_then_ends_the_job_in_history(admin_client, jobs):
    job = jobs["scheduled"]
    response = act(admin_client, "kill_jobs", job)
    assert response.status_code == 200
    assert "prescient/admin/kill_confirmation.html" in [t.name for t in response.templates]
    content = response.content.decode()
    assert "csrfmiddlewaretoken" in content
    assert f"testapp.thing:{job.entity_key}" in content
    assert "Kill this job?" in content and 'value="Yes, kill it"' in content and "Kill a job" in content
    assert reload(job) is not None

    confirm = {"action": "kill_jobs", "_selected_action": [str(job.pk)], "post": "yes"}
    response = admin_client.post(CHANGELIST, {**confirm, "reason": "  "})
    assert response.status_code == 200  # the page again, with the error
    assert response.context["form"].errors["reason"]
    assert reload(job) is not None

    response = admin_client.post(CHANGELIST, {**confirm, "reason": "customer asked"}, follow=True)
    assert reload(job) is None
    row = JobHistory.objects.get(job_id=job.pk)
    assert row.outcome == Outcome.KILLED
    assert row.reason == "customer asked"
    assert "Killed 1 job." in texts(response)
    assert "customer asked" in LogEntry.objects.get(object_id=str(job.pk)).change_message


@pytest.mark.parametrize("action", ["kill_jobs", "sleep_jobs"])
def test_confirmation__of_several_jobs_speaks_of_them(admin_client, jobs, action):
    content = act(admin_client, action, jobs["scheduled"], jobs["paused"]).content.decode()
    verb = action.removesuffix("_jobs")
    assert f'value="Yes, {verb} them"' in content and f"{verb.capitalize()} 2 jobs" in content
    assert "these 2 jobs" in content
    content = act(admin_client, action, jobs["scheduled"]).content.decode()
    assert f'value="Yes, {verb} it"' in content and "this job" in content


def test_kill__of_a_running_job_is_requested_until_its_run_returns(admin_client, jobs):
    job = jobs["running"]
    response = admin_client.post(
        CHANGELIST,
        {"action": "kill_jobs", "_selected_action": [str(job.pk)], "post": "yes", "reason": "runaway"},
        follow=True,
    )
    job = reload(job)
    assert job.state == State.RUNNING
    assert job.end_requested == Outcome.KILLED
    assert job.end_reason == "runaway"
    assert not JobHistory.objects.exists()
    assert "1 job is running: it ends killed when its run returns." in texts(response)


def test_kill__select_across_kills_every_job_matching_the_filter(admin_client, jobs):
    confirm = {"action": "kill_jobs", "_selected_action": [str(jobs["buried"].pk)], "select_across": "1"}
    response = admin_client.post(CHANGELIST + "?state=buried", {**confirm, "index": "0"})
    assert response.context["total"] == 1
    assert 'name="select_across" value="1"' in response.content.decode()
    admin_client.post(CHANGELIST + "?state=buried", {**confirm, "post": "yes", "reason": "cleanup"})
    assert set(FutureJob.objects.values_list("state", flat=True)) == {State.SCHEDULED, State.RUNNING, State.PAUSED}
    assert JobHistory.objects.get().reason == "cleanup"


# --- permissions ---------------------------------------------------------------------------------


def test_view_only_user__sees_the_list_but_no_actions(viewer, jobs):
    response = viewer.get(CHANGELIST)
    assert response.status_code == 200
    assert b'name="action"' not in response.content
    assert viewer.get(change_url(jobs["scheduled"])).status_code == 200


@pytest.mark.parametrize("action", ["pause_jobs", "release_jobs", "run_jobs_now", "sleep_jobs", "kill_jobs"])
def test_view_only_user__posting_an_action_changes_nothing(viewer, jobs, action):
    before = list(FutureJob.objects.values())
    act(viewer, action, *jobs.values(), post="yes", reason="no rights", at="2026-12-01 09:00")
    assert list(FutureJob.objects.values()) == before
    assert not JobHistory.objects.exists()


def test_view_only_user__cannot_pause_a_workflow(viewer, jobs, t0):
    workflow = Workflow.objects.create(name="wf")
    act(viewer, "pause_workflows", workflow, url="/admin/prescient/workflow/")
    assert Workflow.objects.get().paused_at is None
    assert reload(jobs["scheduled"]).state == State.SCHEDULED


def test_history__has_no_add_change_or_delete(admin_client, jobs, t0):
    prescient.kill(jobs["scheduled"], "gone", now=t0)
    row = JobHistory.objects.get()
    assert admin_client.get("/admin/prescient/jobhistory/add/").status_code == 403
    assert admin_client.post(change_url(row), {"reason": "rewritten"}).status_code == 403
    assert admin_client.post(f"/admin/prescient/jobhistory/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    response = admin_client.get("/admin/prescient/jobhistory/")
    # The one action offered runs a finished job again as a new job; it never edits history.
    assert b'value="delete_selected"' not in response.content
    assert b'value="rerun_jobs"' in response.content
    assert JobHistory.objects.get().reason == "gone"
    model_admin = admin.site.get_model_admin(JobHistory)
    request = response.wsgi_request
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, row)
    assert not model_admin.has_delete_permission(request, row)


# --- workflows -----------------------------------------------------------------------------------


def test_workflow_actions__pause_and_release_every_job_of_the_workflow(admin_client, make_job, make_thing, t0):
    scheduled = prescient.schedule(make_thing(), "test.record", workflow="wf", now=t0)
    other = prescient.schedule(make_thing(), "test.record", workflow="other", now=t0)
    workflow = Workflow.objects.get(name="wf")
    url = "/admin/prescient/workflow/"

    response = act(admin_client, "pause_workflows", workflow, url=url)
    assert Workflow.objects.get(name="wf").paused_at is not None
    assert reload(scheduled).state == State.PAUSED
    assert reload(other).state == State.SCHEDULED
    assert "Paused workflow wf: 1 job paused." in texts(response)
    changelist = admin_client.get(url)
    assert changelist.context["cl"].result_list.get(name="wf").jobs_paused == 1

    response = act(admin_client, "release_workflows", workflow, url=url)
    assert Workflow.objects.get(name="wf").paused_at is None
    assert reload(scheduled).state == State.SCHEDULED
    assert "Released workflow wf: 1 job released." in texts(response)
    assert LogEntry.objects.filter(object_id="wf").count() == 2
