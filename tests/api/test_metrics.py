"""GET /prescient/metrics: who may scrape it, and the figures it reports (prescient.queries.figures)."""

from __future__ import annotations

import io
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from prescient import counting, queries
from prescient.api.metrics import exposition
from prescient.models import FutureJob, JobHistory, Worker
from prescient.states import Outcome, State
from prescient.system_checks import check_metrics
from tests.api.test_views import make_token, make_user

pytestmark = pytest.mark.django_db

URL = "/prescient/metrics"


def scrape(client, **headers):
    return client.get(URL, headers=headers)


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(name, sorted labels): value}`` of a Prometheus text body (parsed by prometheus_client)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def history(outcome, finished_at, n=1):
    for i in range(n):
        JobHistory.objects.create(
            job_id=10_000 + JobHistory.objects.count() + i, entity_name="testapp.thing", entity_key=str(i),
            job_exec="test.record", outcome=outcome, first_check_at=finished_at, created_at=finished_at,
            finished_at=finished_at,
        )


def worker(name, heartbeat_at, skew=0.0, stopped_at=None):
    return Worker.objects.create(
        name=name, hostname="h", pid=1, started_at=heartbeat_at, heartbeat_at=heartbeat_at,
        clock_skew_seconds=skew, stopped_at=stopped_at,
    )


# --- who may scrape -----------------------------------------------------------------------------


def test_metrics__anonymous_is_refused_with_401():
    response = scrape(Client())
    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_metrics__a_wrong_token_is_refused_with_401():
    response = scrape(Client(), Authorization="Bearer pst_not-a-token")
    assert response.status_code == 401
    assert "not valid" in response.json()["message"]


def test_metrics__a_token_without_the_view_permission_is_refused_with_403():
    secret = make_token(make_user("nope", perms=["view_jobhistory"]))
    response = scrape(Client(), Authorization=f"Bearer {secret}")
    assert response.status_code == 403
    assert "prescient.view_futurejob" in response.json()["message"]


def test_metrics__a_token_scoped_to_some_checks_is_refused_with_403():
    secret = make_token(make_user(), checks=["test.record"])
    response = scrape(Client(), Authorization=f"Bearer {secret}")
    assert response.status_code == 403
    assert "all checks" in response.json()["message"]


def test_metrics__a_token_with_the_view_permission_gets_the_text_format():
    secret = make_token(make_user("viewer", perms=["view_futurejob"]))
    response = scrape(Client(), Authorization=f"Bearer {secret}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    assert samples(response.content)[("prescient_workers_alive", ())] == 0


def test_metrics__a_logged_in_user_with_the_view_permission_may_scrape():
    client = Client()
    client.force_login(make_user("person", perms=["view_futurejob"]))
    assert scrape(client).status_code == 200
    client.force_login(make_user("other", perms=[]))
    assert scrape(client).status_code == 403


def test_metrics__other_methods_get_a_json_405():
    secret = make_token(make_user())
    response = Client().post(URL, headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json()["code"] == "method_not_allowed"


def test_metrics__without_prometheus_client_answers_501_after_authentication(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if it were not installed
    assert scrape(Client()).status_code == 401
    secret = make_token(make_user())
    response = scrape(Client(), Authorization=f"Bearer {secret}")
    assert response.status_code == 501
    assert response.json()["code"] == "not_implemented"
    assert "prescient[metrics]" in response.json()["message"]


def test_system_check__says_when_the_url_is_mounted_without_prometheus_client(monkeypatch):
    assert check_metrics() == []
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    (message,) = check_metrics()
    assert message.id == "prescient.I001"
    assert "/prescient/metrics answers 501" in message.msg
    said = io.StringIO()
    call_command("check", stdout=said, stderr=said)  # not by every command: only before deploying
    assert "I001" not in said.getvalue()
    with pytest.raises(SystemCheckError, match="prescient.I001"):
        call_command("check", deploy=True, fail_level="INFO")


def test_system_check__is_not_said_by_every_command(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    call_command("prescient_status", skip_checks=False)  # a command's own system checks run
    assert "I001" not in capsys.readouterr().err


def test_system_check__is_silent_without_urls(monkeypatch, settings):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    del settings.ROOT_URLCONF  # e.g. settings made for workers only
    assert check_metrics() == []


# --- the figures ----------------------------------------------------------------------------------


def test_figures__every_metric_with_its_value(make_job, t0):
    for minutes in (30, 5):
        make_job(next_check_at=t0 - timedelta(minutes=minutes))  # due, the oldest 30 minutes late
    make_job(next_check_at=t0)  # due at once: not late
    make_job(next_check_at=t0 + timedelta(minutes=15))  # not due yet
    make_job(state=State.PAUSED, next_check_at=t0 - timedelta(days=1))  # paused: never due
    make_job(state=State.RUNNING, reserved_by="worker:x", reserved_at=t0, next_check_at=t0 - timedelta(hours=1))
    make_job(state=State.BURIED, next_check_at=t0 - timedelta(hours=2))
    history(Outcome.COMPLETED, t0 - timedelta(minutes=1), n=3)
    history(Outcome.FAILED, t0 - timedelta(minutes=59))
    history(Outcome.FAILED, t0 - timedelta(minutes=61))  # before the window
    history(Outcome.KILLED, t0 - timedelta(days=3))
    history(Outcome.CANCELLED, t0 + timedelta(seconds=1))  # after now: not in [now - 1h, now)
    worker("w-alive", t0 - timedelta(seconds=5), skew=-1.25)
    worker("w-fast", t0, skew=3.5)
    worker("w-silent", t0 - timedelta(hours=1))
    worker("w-stopped", t0, stopped_at=t0)

    body, content_type = exposition(t0)
    got = samples(body)

    assert content_type.startswith("text/plain")
    assert {labels[0][1]: v for (name, labels), v in got.items() if name == "prescient_jobs"} == {
        "scheduled": 4, "reserved": 0, "running": 1, "paused": 1, "buried": 1, "waiting": 0,
    }
    assert got[("prescient_due_jobs", ())] == 3
    assert got[("prescient_oldest_overdue_seconds", ())] == 30 * 60
    assert got[("prescient_workers_alive", ())] == 2
    # No gauge repeats a counter: what ended is prescient_job_outcomes_total (#35 item 8).
    assert not any(name.startswith("prescient_finished_jobs") for name, _labels in got)
    assert {(dict(labels)["host"], dict(labels)["worker"]): v for (name, labels), v in got.items()
            if name == "prescient_worker_clock_skew_seconds"} == {("h", "w-alive"): -1.25, ("h", "w-fast"): 3.5}


def test_figures__follow_now(make_job, t0):
    make_job(next_check_at=t0)
    before = queries.figures(t0 - timedelta(seconds=1))
    assert (before.due, before.oldest_overdue_seconds) == (0, 0.0)
    later = queries.figures(t0 + timedelta(minutes=10))
    assert (later.due, later.oldest_overdue_seconds) == (1, 600.0)


def test_figures__counts_are_exact_up_to_the_limit(make_job, t0):
    for minutes in range(5):
        make_job(next_check_at=t0 - timedelta(minutes=minutes))
    exact = queries.figures(t0, exact_up_to=5)
    assert (exact.jobs["scheduled"], exact.due, exact.estimated) == (5, 5, [])
    assert counting.capped_count(FutureJob.objects.all(), 4) is None
    assert counting.capped_count(FutureJob.objects.all(), 5) == 5


def test_figures__above_the_limit_a_count_is_the_estimate_on_postgresql(make_job, t0):
    for minutes in range(12):
        make_job(next_check_at=t0 - timedelta(minutes=minutes))
    make_job(state=State.PAUSED)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE prescient_futurejob")  # statistics of every row (a small table)
    figures = queries.figures(t0, exact_up_to=10)
    if connection.vendor == "postgresql":
        assert figures.estimated == ["jobs:scheduled", "due"]
        # The planner's estimate, never below what was counted: with fresh statistics of a
        # small table it is the true count.
        assert figures.jobs["scheduled"] == 12 and figures.due == 12
    else:  # SQLite has no estimate to give: it counts
        assert (figures.jobs["scheduled"], figures.due, figures.estimated) == (12, 12, [])
    assert figures.jobs["paused"] == 1


def test_figures__read_no_history(t0, django_assert_max_num_queries):
    history(Outcome.COMPLETED, t0 - timedelta(minutes=10), n=2)
    with django_assert_max_num_queries(9) as captured:
        queries.figures(t0)
    assert not [q["sql"] for q in captured.captured_queries if "prescient_jobhistory" in q["sql"]]
