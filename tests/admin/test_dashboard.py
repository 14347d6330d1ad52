"""The operator's console in the admin: dashboard, workflow buttons, workers, and staying fast.

The browser drives the same pages in tests/admin/test_browser.py; bench/admin_bench.py times them
with a million jobs on PostgreSQL. Here: what they show, who may use them, and a number of
queries that does not grow with the number of jobs.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from prescient import queries
from prescient.admin import charts, display
from prescient.models import FutureJob, JobHistory, Worker, Workflow
from prescient.states import Outcome, State

JOBS = "/admin/prescient/futurejob/"
DASHBOARD = "/admin/prescient/futurejob/dashboard/"
WORKFLOWS = "/admin/prescient/workflow/"
WORKERS = "/admin/prescient/worker/"
HISTORY = "/admin/prescient/jobhistory/"
#: 10:05 UTC: five minutes into the 10:00 slot (15-minute slots in tests/settings.py).
NOW = datetime.fromisoformat("2026-11-22T10:05:00+00:00")


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """The admin asks for the real time: give it a fixed one."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    return NOW


@pytest.fixture
def viewer(db: None) -> Client:
    """A staff user with only the view permissions of prescient's models."""
    user = User.objects.create_user("viewer", password="not-used", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="prescient", codename__startswith="view_")
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def stranger(db: None) -> Client:
    """A staff user without any permission on prescient."""
    client = Client()
    client.force_login(User.objects.create_user("stranger", password="not-used", is_staff=True))
    return client


def finished(job: FutureJob, outcome: str, at: datetime, **fields: Any) -> JobHistory:
    row = JobHistory.from_job(job, outcome, at, **fields)
    row.save()
    return row


def many_jobs(count: int, now: datetime) -> None:
    """``count`` jobs in every state and as many history rows, straight into the tables."""
    states = [State.SCHEDULED, State.SCHEDULED, State.PAUSED, State.BURIED, State.RUNNING]
    FutureJob.objects.bulk_create(
        FutureJob(
            entity_name="testapp.thing", entity_key=str(n), job_exec=("test.record", "test.slow")[n % 2],
            workflow=("", "nightly", "onboarding")[n % 3], state=states[n % 5],
            reserved_by="worker:1:x" if states[n % 5] == State.RUNNING else "",
            first_check_at=now, next_check_at=now + timedelta(minutes=17 * n - 600), created_at=now,
            recent_errors=[{"at": now.isoformat(), "error": "boom"}] if n % 7 == 0 else [],
        )
        for n in range(count)
    )
    JobHistory.objects.bulk_create(
        JobHistory(
            job_id=10_000 + n, entity_name="testapp.thing", entity_key=str(n), job_exec="test.record",
            outcome=list(Outcome)[n % len(Outcome)], run_count=1 + n % 3, total_run_seconds=n / 10,
            first_check_at=now, created_at=now - timedelta(days=8), finished_at=now - timedelta(minutes=41 * n),
        )
        for n in range(count)
    )
    for name in ("nightly", "onboarding"):
        Workflow.objects.get_or_create(name=name)
    Worker.objects.create(
        name="worker:1:x", hostname="web-1", pid=7, started_at=now, heartbeat_at=now, jobs_done=3,
    )


# --- the dashboard -------------------------------------------------------------------------------


def test_dashboard__shows_states_overdue_workers_and_three_charts(admin_client, make_job, now):
    make_job(next_check_at=now + timedelta(minutes=20))  # 10:25: the second bar (10:15–10:30)
    make_job(next_check_at=now + timedelta(hours=23, minutes=50))  # the last bar
    make_job(next_check_at=now + timedelta(days=2))  # beyond the chart
    late = make_job("test.slow", next_check_at=now - timedelta(hours=2))
    make_job(state=State.PAUSED, last_state=State.SCHEDULED)
    done = make_job(state=State.BURIED)
    finished(done, Outcome.COMPLETED, now - timedelta(hours=1))
    finished(done, Outcome.COMPLETED, now - timedelta(hours=1, minutes=5))
    finished(done, Outcome.FAILED, now - timedelta(minutes=30))
    finished(done, Outcome.KILLED, now - timedelta(days=3))
    Worker.objects.create(name="worker:web-1:42", hostname="web-1", pid=42, started_at=now, heartbeat_at=now)
    Worker.objects.create(name="gone", hostname="web-2", pid=1, started_at=now, heartbeat_at=now - timedelta(hours=1))

    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    assert "prescient/admin/dashboard.html" in [t.name for t in response.templates]
    context = response.context
    assert {str(row["label"]): row["count"] for row in context["states"]} == {
        "Scheduled": 4, "Reserved": 0, "Running": 0, "Paused": 1, "Buried": 1, "Waiting": 0,
    }
    assert context["due_now"] == 1
    assert context["oldest"]["job"] == late
    assert context["oldest"]["late"] == "2\xa0hours"
    assert [worker["name"] for worker in context["workers"]] == ["worker:web-1:42"]

    due, day, week = context["charts"]
    assert [chart.key for chart in context["charts"]] == ["due", "day", "week"]
    assert (len(due.x_ticks), due.total) == (8, 2)  # a label every 3 hours; the job 2 days on is not shown
    assert [bar.title for bar in due.bars] == ["10:15–10:30: 1 scheduled", "09:45–10:00: 1 scheduled"]
    assert {entry.key: entry.total for entry in day.legend} == {"completed": 2, "failed": 1}
    assert {entry.key: entry.total for entry in week.legend} == {"completed": 2, "failed": 1, "killed": 1}
    assert [bar.title for bar in day.bars][-2:] == ["09:00–09:15: 2 completed", "09:30–09:45: 1 failed"]

    content = response.content.decode()
    assert content.count('<svg viewBox="0 0 720') == 3
    assert 'id="prescient-chart-week"' in content
    assert "overdue by 2\xa0hours" in content
    assert "worker:web-1:42" in content and "web-2" not in content
    # Nothing from the internet: no absolute or protocol-relative asset URL, no CDN host. (A bare
    # "cdn" is not enough to look for: the random CSRF token contains it about once in 700 runs.)
    assert not re.search(r'(?:src|href)="(?:https?:)?//', content)
    assert "cdn." not in content.lower()


def test_dashboard__with_no_jobs_draws_empty_charts(admin_client, now):
    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    content = response.content.decode()
    assert content.count('<svg viewBox="0 0 720') == 3
    assert "No scheduled job is due in the next 24 hours." in content
    assert "None: nothing is late." in content
    assert "No worker is alive." in content


def test_dashboard__breadcrumbs_lead_home_and_to_the_app_not_to_a_model_list(admin_client):
    content = admin_client.get(DASHBOARD).content.decode()
    crumbs = re.search(r'<(ol|div) class="breadcrumbs">(.*?)</\1>', content, re.DOTALL)
    assert crumbs, content
    links = re.findall(r'href="([^"]+)"', crumbs.group(2))
    assert links == [reverse("admin:index"), reverse("admin:app_list", args=["prescient"])]
    assert "Dashboard" in crumbs.group(2)


@pytest.mark.parametrize(
    ("due", "bar"),
    [
        ("10:14:59.999999", 0),
        ("10:15:00", 1),
        ("10:29:59", 1),
        ("10:30:00", 2),
        ("11:59:59", 7),
    ],
)
def test_bucket_counts__puts_each_time_in_its_slot_in_the_database(db, make_job, due, bar):
    """The same bucket on SQLite and on PostgreSQL: a slot boundary starts a new bar."""
    make_job(next_check_at=datetime.fromisoformat(f"2026-11-22T{due}+00:00"))
    start = datetime.fromisoformat("2026-11-22T10:00:00+00:00")
    counts = queries.bucket_counts(FutureJob.objects.all(), "next_check_at", start, 15, key="state")
    assert counts == {(bar, State.SCHEDULED): 1}


def test_bucket_counts__groups_in_one_query(db, make_job, django_assert_num_queries):
    start = datetime.fromisoformat("2026-11-22T10:00:00+00:00")
    for minutes in (0, 1, 14, 15, 61, 24 * 60 - 1):
        make_job(next_check_at=start + timedelta(minutes=minutes))
    with django_assert_num_queries(1):
        counts = queries.bucket_counts(FutureJob.objects.all(), "next_check_at", start, 60, key="state")
    assert counts == {(0, "scheduled"): 4, (1, "scheduled"): 1, (23, "scheduled"): 1}


@pytest.mark.parametrize(
    ("span", "slot", "expected"),
    [
        (24 * 60, 15, 15),  # 96 bars of one slot
        (7 * 24 * 60, 15, 60),  # 168 bars of four slots
        (24 * 60, 1, 10),  # 144 bars
        (7 * 24 * 60, 1, 60),
        (24 * 60, 60, 60),
        (24 * 60, 1440, 1440),  # one bar
    ],
)
def test_bucket_minutes__gives_whole_slots_and_at_most_168_bars(span, slot, expected):
    assert charts.bucket_minutes(span, slot) == expected
    assert span // expected <= charts.MAX_BARS


def test_nice_ceiling_and_duration():
    assert [charts.nice_ceiling(n) for n in (0, 1, 3, 7, 11, 4000)] == [1, 1, 5, 10, 20, 5000]
    assert [display.duration(s) for s in (0.25, 12.54, 200, 7500)] == ["0.25 s", "12.5 s", "3 min 20 s", "2 h 5 min"]


def test_dashboard__needs_view_permission_on_jobs(viewer, stranger, client, db):
    assert viewer.get(DASHBOARD).status_code == 200
    assert stranger.get(DASHBOARD).status_code == 403
    response = client.get(DASHBOARD)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_app_index__links_the_dashboard_for_those_who_may_see_it(admin_client, viewer, db):
    assert DASHBOARD in admin_client.get("/admin/prescient/").content.decode()
    assert DASHBOARD in viewer.get("/admin/prescient/").content.decode()
    assert DASHBOARD in admin_client.get(JOBS).content.decode()  # the list's object tools
    workers_only = User.objects.create_user("workers-only", password="not-used", is_staff=True)
    workers_only.user_permissions.add(Permission.objects.get(codename="view_worker"))
    client = Client()
    client.force_login(workers_only)
    response = client.get("/admin/prescient/")
    assert response.status_code == 200
    assert DASHBOARD not in response.content.decode()


# --- no per-row queries --------------------------------------------------------------------------


# Each page: the session and the user, then a fixed set. The job list: the workflows of its
# filter, the count, the page, MIN/MAX for the date hierarchy. The dashboard: the snapshot of
# prescient.status (5), the health per check (an aggregate per table, the last errors, and off
# PostgreSQL the sample of run times: 4), the oldest overdue job, one GROUP BY per chart (3).
@pytest.mark.parametrize("count", [10, 200])
@pytest.mark.parametrize(
    ("url", "most"),
    [
        (JOBS, 6),
        (JOBS + "?due=overdue&state__exact=scheduled", 6),
        (JOBS + "?q=42", 7),  # and the entity names the key is looked up under (one walk)
        (DASHBOARD, 15),
        (WORKFLOWS, 4),
        (HISTORY, 5),
        (HISTORY + "?q=42", 6),
        (WORKERS, 4),
    ],
)
def test_pages__take_the_same_few_queries_for_10_or_200_jobs(
    admin_client, django_assert_max_num_queries, now, url, most, count
):
    many_jobs(count, now)
    with django_assert_max_num_queries(most):
        response = admin_client.get(url)
    assert response.status_code == 200


# --- workflows: a button per row ------------------------------------------------------------------


@pytest.fixture
def workflows(db: None, make_thing: Any, t0: datetime) -> dict[str, Workflow]:
    import prescient

    for name in ("nightly", "onboarding"):
        prescient.schedule(make_thing(), "test.record", workflow=name, now=t0)
    return {w.name: w for w in Workflow.objects.all()}


def test_workflow_list__has_a_pause_and_a_release_button_per_row(admin_client, workflows):
    content = admin_client.get(WORKFLOWS, {"q": "nightly"}).content.decode()
    assert 'formaction="/admin/prescient/workflow/nightly/pause/?_changelist_filters=q%3Dnightly"' in content
    assert 'formaction="/admin/prescient/workflow/nightly/release/?_changelist_filters=q%3Dnightly"' in content
    assert 'value="release" disabled' in content  # nothing to release yet
    assert "csrfmiddlewaretoken" in content  # the buttons submit the changelist's own form


def test_workflow_button__pauses_then_releases_and_returns_to_the_filtered_list(admin_client, workflows):
    response = admin_client.post(WORKFLOWS + "nightly/pause/?_changelist_filters=q%3Dnightly")
    assert response.status_code == 302
    assert response["Location"] == WORKFLOWS + "?q=nightly"
    assert Workflow.objects.get(name="nightly").is_paused
    assert not Workflow.objects.get(name="onboarding").is_paused
    assert set(FutureJob.objects.filter(workflow="nightly").values_list("state", flat=True)) == {State.PAUSED}
    assert texts(response) == ["Paused workflow nightly: 1 job paused."]
    entry = LogEntry.objects.get(object_id="nightly")
    assert (entry.action_flag, entry.change_message) == (CHANGE, "Paused workflow nightly: 1 job paused.")

    response = admin_client.post(WORKFLOWS + "nightly/release/", follow=True)
    assert response.redirect_chain == [(WORKFLOWS, 302)]
    assert not Workflow.objects.get(name="nightly").is_paused
    assert set(FutureJob.objects.filter(workflow="nightly").values_list("state", flat=True)) == {State.SCHEDULED}
    assert "Released workflow nightly: 1 job released." in texts(response)


def test_workflow_button__refuses_a_get_and_an_unknown_workflow(admin_client, workflows):
    assert admin_client.get(WORKFLOWS + "nightly/pause/").status_code == 405
    assert admin_client.post(WORKFLOWS + "nope/pause/").status_code == 404
    assert not Workflow.objects.get(name="nightly").is_paused


def test_workflow_button__is_neither_shown_nor_allowed_for_a_view_only_user(viewer, workflows):
    response = viewer.get(WORKFLOWS)
    assert response.status_code == 200
    assert "formaction" not in response.content.decode()
    assert viewer.post(WORKFLOWS + "nightly/pause/").status_code == 403
    assert not Workflow.objects.get(name="nightly").is_paused
    assert not LogEntry.objects.exists()


def test_workflow_button__needs_the_csrf_token(workflows, admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(WORKFLOWS + "nightly/pause/").status_code == 403
    assert not Workflow.objects.get(name="nightly").is_paused
    token = client.get(WORKFLOWS).cookies["csrftoken"].value
    response = client.post(WORKFLOWS + "nightly/pause/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Workflow.objects.get(name="nightly").is_paused


def test_job_action__needs_the_csrf_token(make_job, admin_user):
    job = make_job()
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    data = {"action": "pause_jobs", "index": "0", "_selected_action": [str(job.pk)]}
    assert client.post(JOBS, data).status_code == 403
    assert FutureJob.objects.get(pk=job.pk).state == State.SCHEDULED
    assert not LogEntry.objects.exists()


# --- workers ---------------------------------------------------------------------------------------


def test_worker_list__shows_status_heartbeat_age_and_progress(admin_client, now):
    Worker.objects.create(name="alive", hostname="web-1", pid=11, concurrency=4, started_at=now,
                          heartbeat_at=now - timedelta(seconds=3), last_slot_at=now, jobs_done=1834)
    Worker.objects.create(name="stale", hostname="web-2", pid=12, started_at=now, heartbeat_at=now - timedelta(hours=2))
    Worker.objects.create(name="stopped", hostname="web-3", pid=13, started_at=now, heartbeat_at=now,
                          stopped_at=now)
    response = admin_client.get(WORKERS)
    assert response.status_code == 200
    content = response.content.decode()
    for text in ("alive</span>", "stale</span>", "stopped</span>", "3 s ago", "2\xa0hours ago", "1834", "web-1"):
        assert text in content, text
    assert 'name="action"' not in content
    alive = admin_client.get(WORKERS, {"status": "alive"}).context["cl"].result_list
    assert [worker.name for worker in alive] == ["alive"]


def test_worker_admin__is_view_only(admin_client, viewer, now):
    worker = Worker.objects.create(name="w", hostname="h", pid=1, started_at=now, heartbeat_at=now)
    url = f"{WORKERS}{worker.pk}/change/"
    assert admin_client.get(WORKERS + "add/").status_code == 403
    assert admin_client.post(url, {"name": "renamed"}).status_code == 403
    assert admin_client.post(f"{WORKERS}{worker.pk}/delete/", {"post": "yes"}).status_code == 403
    assert 'name="_save"' not in admin_client.get(url).content.decode()
    assert viewer.get(WORKERS).status_code == 200
    assert viewer.get(url).status_code == 200
    assert Worker.objects.get().name == "w"


# --- lists -------------------------------------------------------------------------------------------


def test_history_list__shows_run_times_and_links_back_to_the_row(admin_client, make_job, t0):
    job = make_job()
    row = finished(job, Outcome.COMPLETED, t0, run_count=4, total_run_seconds=6.0, created_at=t0 - timedelta(hours=2))
    content = admin_client.get(HISTORY).content.decode()
    assert "6.0 s" in content  # run time
    assert "1.5 s" in content  # per run
    assert "2 h 0 min" in content  # lifetime
    assert f'href="{HISTORY}{row.pk}/change/' in content


def test_job_page__lists_what_people_did_to_the_job_in_the_admin(admin_client, make_job):
    job = make_job()
    assert "None yet." in admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    admin_client.post(JOBS, {"action": "pause_jobs", "index": "0", "_selected_action": [str(job.pk)]})
    admin_client.post(JOBS, {"action": "release_jobs", "index": "0", "_selected_action": [str(job.pk)]})
    content = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert content.index("Released from the admin.") < content.index("Paused from the admin.")  # newest first
    assert "<td>admin</td>" in content


def test_job_list__is_titled_by_the_model_not_select_to_change(admin_client, viewer, db):
    assert admin_client.get(JOBS).context["title"] == "Future jobs"
    assert viewer.get(JOBS).context["title"] == "Future jobs"
    assert admin_client.get(WORKFLOWS).context["title"] == "Workflows"


@pytest.mark.parametrize(
    ("term", "found"),
    [("KEY", {"a"}), ("testapp.thing#KEY", {"a"}), ("nightly", {"a", "b"}), ("nigh", set()), ("K", set())],
)
def test_job_search__matches_an_exact_key_entity_or_workflow(admin_client, make_job, make_thing, term, found):
    a = make_job(workflow="nightly")
    b = make_job(workflow="nightly")
    make_job(workflow="other")
    names = {a.pk: "a", b.pk: "b"}
    response = admin_client.get(JOBS, {"q": term.replace("KEY", a.entity_key)})
    assert {names.get(job.pk, "?") for job in response.context["cl"].result_list} == found


def test_check_filter__lists_registered_checks_and_keeps_an_unknown_one(admin_client, make_job):
    make_job("gone.check")
    make_job()
    response = admin_client.get(JOBS, {"job_exec": "gone.check"})
    assert [job.job_exec for job in response.context["cl"].result_list] == ["gone.check"]
    content = response.content.decode()
    assert "?job_exec=test.record" in content and "?job_exec=gone.check" in content


def test_workflow_filter__lists_the_workflows(admin_client, make_job):
    make_job(workflow="nightly")
    make_job()
    Workflow.objects.create(name="nightly")
    response = admin_client.get(JOBS, {"workflow": "nightly"})
    assert [job.workflow for job in response.context["cl"].result_list] == ["nightly"]
    assert "?workflow=nightly" in response.content.decode()


@pytest.mark.parametrize(
    ("query", "back", "choices"),
    [
        ({}, "All dates", ["November 2026", "December 2026"]),
        (
            {"next_check_at__year": "2026", "next_check_at__month": "11"},
            "2026",
            ["November 22", "November 23", "November 24"],  # the 23rd has no job
        ),
        (
            {"next_check_at__year": "2026", "next_check_at__month": "11", "next_check_at__day": "23"},
            "November 2026",
            ["November 23"],
        ),
    ],
)
def test_date_hierarchy__lists_the_span_from_one_query(admin_client, make_job, t0, query, back, choices):
    for days in (0, 2, 10):
        make_job(next_check_at=t0 + timedelta(days=days))
    response = admin_client.get(JOBS, query)
    hierarchy = response.context["prescient_date_hierarchy"]
    assert hierarchy["back"]["title"] == back
    assert [choice["title"] for choice in hierarchy["choices"]] == choices
    assert 'class="toplinks"' in response.content.decode()


@pytest.mark.parametrize(
    ("slot_minutes", "span", "bar"),
    [(15, 24 * 60, 15), (1, 120, 1), (5, 12 * 60, 5), (60, 24 * 60, 60), (30, 24 * 60, 30)],
)
def test_near_term_charts__draw_a_bar_per_slot(slot_minutes, span, bar):
    """#35 item 3: with one-minute slots every job fell into one or two 10-minute bars of a
    24-hour chart; the near-term charts now reach as far as a bar per slot allows."""
    from prescient.admin.charts import MAX_BARS, bucket_minutes, near_span

    assert near_span(slot_minutes) == span
    assert bucket_minutes(span, slot_minutes) == bar
    assert span // bar <= MAX_BARS


@pytest.mark.django_db
def test_dashboard__with_one_minute_slots_titles_the_span_it_draws(admin_client, settings):
    settings.PRESCIENT = {**settings.PRESCIENT, "SLOT_MINUTES": 1}
    content = admin_client.get(reverse("admin:prescient_futurejob_dashboard")).content.decode()
    assert "Due in the next 2 hours" in content and "Finished in the past 2 hours" in content
    assert "per 1 min (one slot)" in content
