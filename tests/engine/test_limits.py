"""Limits and rates per key, held by the database (issue #33, item 2), in process on SQLite and
PostgreSQL: what a claim takes, what it leaves due, and what it costs when none is declared
(tests/faults/test_limits.py has the same under real workers)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import prescient
from prescient import limits
from prescient.engine import store
from prescient.engine.decisions import Decision, TickSummary
from prescient.models import FutureJob, JobHistory, RateBucket
from prescient.states import Event, Outcome, State
from tests.testapp.models import Thing

pytestmark = pytest.mark.django_db


def claim(t0, size=100, token="tick:t"):
    return store.claim(t0, size, token, start=True)


def finish(jobs, token, t0):
    decisions = [Decision(job=job, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True) for job in jobs]
    store.settle(decisions, token, t0, TickSummary())


def test_a_limit_of_2__claims_2_of_5_and_one_more_when_one_ends(register, make_thing, t0):
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=2))
    for _ in range(5):
        prescient.schedule(make_thing(), "test.limited", now=t0)
    first = claim(t0, token="tick:a")
    assert len(first) == 2
    assert claim(t0, token="tick:b") == []  # another claimer: the database says no room
    finish(first[:1], "tick:a", t0)
    again = claim(t0, token="tick:c")
    assert len(again) == 1
    held = FutureJob.objects.filter(state=State.SCHEDULED)
    assert held.count() == 2 and {(j.failure_count, j.run_count) for j in held} == {(0, 0)}  # untouched


def test_a_limit_by_field_path__is_per_value(register, make_thing, t0):
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=1, key="status"))
    for status in ("a", "a", "a", "b", "b", "c"):
        prescient.schedule(make_thing(status=status), "test.limited", now=t0)
    taken = claim(t0)
    assert sorted(Thing.objects.get(pk=job.entity_key).status for job in taken) == ["a", "b", "c"]
    assert {job.limit_key for job in FutureJob.objects.all()} == {"test.limited:a", "test.limited:b", "test.limited:c"}


def test_a_limit_by_callable_and_a_shared_name__holds_across_checks(register, make_thing, t0):
    shared = prescient.Limit(running=1, key=lambda name, key: "carrier", name="carrier")
    register("test.one", lambda thing, job: None, limit=shared)
    register("test.two", lambda thing, job: None, limit=shared)
    for check in ("test.one", "test.two", "test.one"):
        prescient.schedule(make_thing(), check, now=t0)
    assert len(claim(t0)) == 1
    assert {job.limit_key for job in FutureJob.objects.all()} == {"carrier:carrier"}


def test_schedule_many__gives_each_job_its_key_in_one_statement_per_batch(register, make_thing, t0):
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=1, key="status"))
    things = [make_thing(status=s) for s in ("x", "y", "x")]
    assert prescient.schedule_many(Thing.objects.filter(pk__in=[t.pk for t in things]), "test.limited", now=t0) == 3
    keys = dict(FutureJob.objects.values_list("entity_key", "limit_key"))
    assert keys == {str(things[0].pk): "test.limited:x", str(things[1].pk): "test.limited:y",
                    str(things[2].pk): "test.limited:x"}


def test_a_rate_of_3_an_hour__starts_3_then_none_until_the_bucket_refills(register, make_thing, t0):
    register("test.rated", lambda thing, job: None, rate=prescient.Rate(runs=3, per=timedelta(hours=1)))
    for _ in range(10):
        prescient.schedule(make_thing(), "test.rated", now=t0)
    first = claim(t0, token="tick:a")
    assert len(first) == 3
    finish(first, "tick:a", t0)
    assert claim(t0, token="tick:b") == []  # no token left, though nothing runs
    RateBucket.objects.update(refilled_at=F("refilled_at") - timedelta(minutes=40))  # 40 minutes pass: 2 tokens
    assert len(claim(t0, token="tick:c")) == 2


def test_a_job_held_back__says_why_and_stays_due_untouched(register, make_thing, t0):
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=1))
    for _ in range(2):
        prescient.schedule(make_thing(), "test.limited", now=t0)
    [running] = claim(t0)
    [waiting] = FutureJob.objects.filter(state=State.SCHEDULED)
    why = limits.holding(list(FutureJob.objects.all()), t0)
    assert why == {waiting.pk: "held by limit test.limited:test.limited (1 of 1 running)"}
    assert running.pk not in why


def test_a_tick__runs_what_the_limit_allows_and_leaves_the_rest_due(register, make_thing, t0):
    ran: list[int] = []
    register("test.limited", lambda thing, job: ran.append(thing.pk), limit=prescient.Limit(running=1))
    for _ in range(3):
        prescient.schedule(make_thing(), "test.limited", now=t0)
    summary = prescient.tick(t0)  # one at a time: each batch takes one, the next batch the next
    assert len(ran) == 3 and summary.counts["completed"] == 3
    assert JobHistory.objects.count() == 3


def test_no_limit_declared__the_claim_sends_what_it_always_sent(register, make_thing, t0):
    register("test.plain", lambda thing, job: None)
    for _ in range(3):
        prescient.schedule(make_thing(), "test.plain", now=t0)
    assert not limits.declared()
    with CaptureQueriesContext(connection) as plain:
        assert len(claim(t0, token="tick:a")) == 3
    FutureJob.objects.update(state=State.SCHEDULED, reserved_by="", reserved_at=None, run_started_at=None)
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=1))
    with CaptureQueriesContext(connection) as declared:
        assert len(claim(t0, token="tick:b")) == 3
    assert len(plain.captured_queries) == 1 if connection.vendor == "postgresql" else len(plain) >= 1
    assert len(declared.captured_queries) > len(plain.captured_queries)  # what a declared limit costs


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: prescient.Limit(running=0), "running"),
        (lambda: prescient.Limit(running=True), "running"),
        (lambda: prescient.Rate(runs=0, per=timedelta(seconds=1)), "runs"),
        (lambda: prescient.Rate(runs=1, per=timedelta(0)), "per"),
        (lambda: prescient.Limit(running=1, key=""), "key"),
        (lambda: prescient.Limit(running=1, name="a:b"), "name"),
    ],
)
def test_a_bad_limit__is_refused_when_declared(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_what_holds_a_job_back__shows_in_the_api_the_jobs_command_status_and_metrics(register, make_thing, t0):
    import json

    from django.core.management import call_command

    from prescient.api.payloads import tasks_out
    from prescient.status import snapshot

    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=1))
    for _ in range(3):
        prescient.schedule(make_thing(), "test.limited", now=t0)
    [running] = claim(t0)
    jobs = list(FutureJob.objects.order_by("pk"))
    out = {row["id"]: row["held_by"] for row in tasks_out(jobs)}
    held = "held by limit test.limited:test.limited (1 of 1 running)"
    assert out == {job.pk: (None if job.pk == running.pk else held) for job in jobs}
    assert snapshot().held == {"test.limited": 2}
    from io import StringIO

    printed = StringIO()
    call_command("prescient_jobs", "--json", stdout=printed)
    rows = [json.loads(line) for line in printed.getvalue().splitlines()]
    assert sorted(row.get("held_by", "") for row in rows) == ["", held, held]
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.core import CollectorRegistry

    from prescient.api.metrics import PrescientCollector

    registry = CollectorRegistry()
    registry.register(PrescientCollector(timezone.now()))
    assert 'prescient_jobs_held{limit="test.limited"} 2.0' in generate_latest(registry).decode()


def test_a_task_backends_limits__hold_its_tasks_by_path_and_by_queue(t0):
    pytest.importorskip("django.tasks")
    from tests.tasksapp import tasks

    backend = tasks.add.get_backend()
    kept = backend.limits
    backend.limits = limits.task_limits({"LIMITS": {
        "tests.tasksapp.tasks.add": {"running": 1},
        "queue:a": {"runs": 2, "per_seconds": 3600},
    }})
    try:
        for i in range(3):
            tasks.add.enqueue(i, 1)
            tasks.echo.using(queue_name="a").enqueue(i)
        keys = sorted(set(FutureJob.objects.values_list("job_exec", "limit_key", "rate_key")))
        assert keys == [
            ("task:tests.tasksapp.tasks.add", "tests.tasksapp.tasks.add:*", ""),
            ("task:tests.tasksapp.tasks.echo", "", "queue/a:*"),
        ]
        claimed = store.claim(timezone.now(), 100, "tick:t", start=True)
        assert sorted(job.job_exec.rpartition(".")[2] for job in claimed) == ["add", "echo", "echo"]
    finally:
        backend.limits = kept
        limits.forget("tasks:tests.tasksapp.tasks.add")
        limits.forget("tasks:queue:a")


@pytest.mark.parametrize(
    ("given", "bad"),
    [
        ({"x.y": {"running": 0}}, "running"),
        ({"x.y": {"runs": 2}}, "x.y"),
        ({"x.y": {"speed": 1}}, "x.y"),
        ({"queue:a": {"runs": 1, "per_seconds": 0}}, "per_seconds"),
        ("fast", "LIMITS"),
    ],
)
def test_a_bad_limits_option__is_reported(given, bad):
    from prescient.conf import option_problems

    found = option_problems("default", {"LIMITS": given})
    assert found and bad in str(found[0]), found


def test_a_running_job_paused_by_a_person__keeps_its_place_under_the_limit(register, make_thing, t0):
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=1))
    for _ in range(2):
        prescient.schedule(make_thing(), "test.limited", now=t0)
    [running] = claim(t0, token="tick:a")
    prescient.pause(job=running.pk)  # its run goes on: it still holds the place
    assert FutureJob.objects.get(pk=running.pk).state == State.PAUSED
    assert claim(t0, token="tick:b") == []


def test_a_backlog_held_by_a_rate__does_not_hide_another_checks_due_jobs(register, make_thing, t0):
    register("test.rated", lambda thing, job: None, rate=prescient.Rate(runs=1, per=timedelta(hours=1)))
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=5))
    for _ in range(60):  # overdue first, in claim order
        prescient.schedule(make_thing(), "test.rated", now=t0 - timedelta(hours=2))
    for _ in range(3):
        prescient.schedule(make_thing(), "test.limited", now=t0)
    first = claim(t0, size=10, token="tick:a")
    second = claim(t0, size=10, token="tick:b")
    assert sorted(job.job_exec for job in first + second) == ["test.limited"] * 3 + ["test.rated"]


def test_a_claim_of_limited_and_unlimited_jobs__returns_each_job_once(register, make_thing, t0):
    """Found by the health test: on SQLite the claim of the jobs under no limit returned every
    job of its token, so those limited.claim had just taken came back twice (run twice)."""
    register("test.limited", lambda thing, job: None, limit=prescient.Limit(running=1))
    register("test.free", lambda thing, job: None)
    for check in ("test.limited", "test.limited", "test.free"):
        prescient.schedule(make_thing(), check, now=t0)
    taken = claim(t0, token="tick:a")
    assert sorted((job.job_exec, job.pk) for job in taken) == sorted(
        FutureJob.objects.filter(reserved_by="tick:a").values_list("job_exec", "pk")
    )
    assert sorted(job.job_exec for job in taken) == ["test.free", "test.limited"]


def test_each_checks_health__counts_its_due_jobs_held_back_per_limit_and_rate(register, make_thing, t0, admin_client):
    """#35 item 2, "held by limits": per check, in prescient.health, the dashboard, the API and
    prescient_status; a limit shared by two checks counts each check's own jobs."""
    import json
    from io import StringIO

    from django.core.management import call_command

    from prescient.health import health
    from tests.api.test_views import Api, make_token, make_user

    shared = prescient.Limit(running=1, key=lambda name, key: "carrier", name="carrier")
    register("test.one", lambda thing, job: None, limit=shared)
    register("test.two", lambda thing, job: None, limit=shared)
    register("test.rated", lambda thing, job: None, rate=prescient.Rate(runs=1, per=timedelta(hours=1)))
    register("test.free", lambda thing, job: None)
    for check in ("test.one", "test.one", "test.two", "test.rated", "test.rated", "test.rated", "test.free"):
        prescient.schedule(make_thing(), check, now=t0)
    taken = claim(t0, token="tick:a")  # one of the carrier's, one rated, the free one
    assert sorted(job.job_exec for job in taken) == ["test.free", "test.one", "test.rated"]
    later = FutureJob.objects.filter(job_exec="test.two").update(next_check_at=t0 + timedelta(hours=1))
    assert later == 1  # not due: not held either

    report = {check.name: (check.due, check.held, check.held_by) for check in health(t0).checks}
    assert report == {
        "test.one": (1, 1, {"carrier": 1}), "test.two": (0, 0, {}), "test.rated": (2, 2, {"test.rated": 2}),
        "test.free": (0, 0, {}),
    }
    assert [c.name for c in health(t0, names=["test.rated"]).checks] == ["test.rated"]

    timezone_now = timezone.now
    try:
        timezone.now = lambda: t0  # the pages and the API ask for the real time
        body = Api(make_token(make_user())).get("health/checks").json()
        page = admin_client.get("/admin/prescient/futurejob/dashboard/").content.decode()
    finally:
        timezone.now = timezone_now
    assert {c["name"]: (c["held"], c["held_by"]) for c in body["checks"]} == {
        "test.one": (1, {"carrier": 1}), "test.two": (0, {}), "test.rated": (2, {"test.rated": 2}),
        "test.free": (0, {}),
    }
    assert 'title="held back by: test.rated 2">2 held by limits</span>' in page
    assert 'title="held back by: carrier 1">1 held by limits</span>' in page

    printed = StringIO()
    call_command("prescient_status", stdout=printed)
    lines = {line.split()[0]: line for line in printed.getvalue().splitlines() if line.startswith("  test.")}
    assert lines["test.rated"].endswith("held=2 (test.rated=2)") and "held=" not in lines["test.free"]
    printed = StringIO()
    call_command("prescient_status", "--json", stdout=printed)
    checks = {c["name"]: c for c in json.loads(printed.getvalue())["health"]["checks"]}
    assert (checks["test.one"]["held"], checks["test.one"]["held_by"]) == (1, {"carrier": 1})
