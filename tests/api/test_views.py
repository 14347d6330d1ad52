"""The JSON API (prescient.api): every endpoint, every error, tokens and their scopes."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import django
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from prescient import slots
from prescient.api import tokens
from prescient.api.views import MAX_BODY_BYTES
from prescient.engine import verbs as services
from prescient.models import ApiToken, FutureJob, JobHistory, Worker, Workflow
from prescient.states import Outcome, State

pytestmark = pytest.mark.django_db

URL = "/prescient/"
ALL_PERMS = ["view_futurejob", "add_futurejob", "change_futurejob", "view_jobhistory"]
SLOT = timedelta(minutes=15)


# --- helpers ----------------------------------------------------------------------------------


def make_user(name="api", perms=ALL_PERMS, **fields):
    user = get_user_model().objects.create_user(username=name, password=None, **fields)  # no slow hashing
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="prescient", codename__in=perms))
    return user


def make_token(user, *, checks=(), all_checks=None):
    if all_checks is None:
        all_checks = not checks
    _token, secret = tokens.issue(user, "test", checks=checks, all_checks=all_checks, now=timezone.now())
    return secret


class Api:
    """A test client that speaks JSON, with a bearer token (or a session)."""

    def __init__(self, secret=None, client=None):
        self.client = client or Client()
        self.secret = secret

    def call(self, method, path, body=None, *, raw=None, headers=None, **query):
        extra = dict(headers or {})
        if self.secret is not None:
            extra.setdefault("Authorization", f"Bearer {self.secret}")
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        kwargs = {"headers": extra}
        if method == "get":
            response = self.client.get(URL + path, query, **kwargs)
        else:
            response = getattr(self.client, method)(
                URL + path, data=data if data is not None else "", content_type="application/json", **kwargs
            )
        return response

    def get(self, path, **query):
        return self.call("get", path, **query)

    def post(self, path, body=None, **kwargs):
        return self.call("post", path, body, **kwargs)


def assert_error(response, status, fields=(), message=None):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    payload = response.json()
    assert set(payload) == {"status", "code", "message", "fields"}
    assert payload["status"] == status
    assert set(payload["fields"]) >= set(fields), payload
    if message is not None:
        text = payload["message"] + " " + " ".join(m for ms in payload["fields"].values() for m in ms)
        assert re.search(message, text), text
    return payload


@pytest.fixture
def user():
    return make_user()


@pytest.fixture
def api(user):
    return Api(make_token(user))


@pytest.fixture
def thing(make_thing):
    return make_thing()


def task_body(thing, check="test.record", **fields):
    body = {"check": check, "entity": {"model": "testapp.thing", "key": str(thing.pk)}}
    if "at" not in fields:
        fields.setdefault("delay_seconds", 3600)
    body.update(fields)
    return body


def live(api, job_id):
    return api.get(f"tasks/{job_id}")


# --- POST tasks -------------------------------------------------------------------------------


def test_create__201_with_the_job_then_200_with_the_same_pending_job(api, thing):
    before = timezone.now()
    first = api.post("tasks", task_body(thing, delay_seconds=3600))
    assert first.status_code == 201, first.content
    job = first.json()
    assert job["check"] == "test.record"
    assert job["entity"] == {"model": "testapp.thing", "key": str(thing.pk)}
    assert job["state"] == "scheduled"
    assert job["last_state"] is None
    due = FutureJob.objects.get(pk=job["id"]).next_check_at
    assert due == slots.round_up(due, 15) and (
        before + timedelta(hours=1) <= due <= timezone.now() + timedelta(hours=1) + SLOT
    )
    assert job["next_check_at"] == due.isoformat().replace("+00:00", "Z")

    again = api.post("tasks", task_body(thing, delay_seconds=60))
    assert again.status_code == 200
    assert again.json() == job  # unchanged: one pending job per entity and check
    assert FutureJob.objects.count() == 1


def test_create__at_is_rounded_up_to_a_slot(api, thing):
    at = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    response = api.post("tasks", task_body(thing, at=at.isoformat().replace("+00:00", "+02:00")))
    assert response.status_code == 201, response.content
    job = FutureJob.objects.get(pk=response.json()["id"])
    wanted = at.replace(tzinfo=None).replace(tzinfo=timezone.get_fixed_timezone(120))
    assert job.next_check_at == slots.round_up(wanted, 15)
    assert response.json()["next_check_at"].endswith("Z")


def test_create__integer_entity_key_and_model_label_in_any_case(api, thing):
    body = task_body(thing)
    body["entity"] = {"model": "testapp.Thing", "key": thing.pk}
    response = api.post("tasks", body)
    assert response.status_code == 201, response.content
    assert response.json()["entity"] == {"model": "testapp.thing", "key": str(thing.pk)}


def test_create__replace_moves_the_due_time_of_the_existing_job(api, thing):
    first = api.post("tasks", task_body(thing, delay_seconds=3600)).json()
    later = api.post("tasks", task_body(thing, delay_seconds=86400, replace=True))
    assert later.status_code == 200
    assert later.json()["id"] == first["id"]
    assert later.json()["next_check_at"] > first["next_check_at"]


def test_create__into_a_paused_workflow_starts_paused(api, thing, make_thing):
    # A workflow exists once a job was scheduled into it (an unknown one is a 404 to pause).
    assert api.post("tasks", task_body(make_thing(), workflow="orders")).status_code == 201
    assert api.post("workflows/orders/pause").status_code == 200
    response = api.post("tasks", task_body(thing, workflow="orders"))
    assert response.status_code == 201
    assert response.json()["state"] == "paused"
    assert response.json()["last_state"] == "scheduled"
    assert response.json()["workflow"] == "orders"


@pytest.fixture
def odd_checks(register):
    register("api.other_model", lambda obj, job: None, model="testapp.Other")
    register("api.no_model", lambda obj, job: None, model=None)
    register("api.not_installed", lambda obj, job: None, model="nowhere.Missing")
    register("api.short_horizon", lambda obj, job: None, horizon_days=1)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"check": "no.such.check"}, "check", "Unknown check 'no.such.check'"),
        ({"check": "api.no_model"}, "check", "names no model"),
        ({"check": "api.not_installed", "entity": {"model": "nowhere.missing", "key": "1"}}, "check", "not installed"),
        (
            {"entity": {"model": "testapp.other", "key": "1"}}, "entity.model",
            "is about testapp.thing, not 'testapp.other'",
        ),
        ({"entity": {"model": "auth.user", "key": "1"}}, "entity.model", "is about testapp.thing"),
        (
            {"entity": {"model": "testapp.thing", "key": "999999"}}, "entity.key",
            "No testapp.thing with the key '999999'",
        ),
        ({"entity": {"model": "testapp.thing", "key": "abc"}}, "entity.key", "No testapp.thing with the key 'abc'"),
        ({"entity": {"model": "testapp.thing", "key": 2**70}}, "entity.key", "No testapp.thing"),
        ({"entity": {"model": "testapp.thing", "key": "-1"}}, "entity.key", "No testapp.thing"),
        ({"entity": {"model": "testapp.thing", "key": True}}, "entity.key", "string or an integer"),
        ({"entity": {"model": "testapp.thing"}}, "entity.key", "required"),
        ({"entity": None}, "entity", ""),
        ({"at": "2026-11-22T10:00:00", "delay_seconds": None}, "at", "no UTC offset"),
        ({"at": "2026-11-22", "delay_seconds": None}, "at", "no UTC offset"),
        ({"at": "next tuesday", "delay_seconds": None}, "at", "Not an ISO 8601"),
        ({"at": 1764000000, "delay_seconds": None}, "at", "ISO 8601"),
        ({"at": "0001-01-01T00:00:00+05:00", "delay_seconds": None}, "at", "out of range"),
        ({"at": "9999-12-31T23:00:00+00:00", "delay_seconds": None}, "at", "beyond the horizon"),
        ({"delay_seconds": 31 * 86400}, "delay_seconds", "beyond the horizon"),
        ({"check": "api.short_horizon", "delay_seconds": 2 * 86400}, "delay_seconds", "beyond the horizon"),
        ({"delay_seconds": -1}, "delay_seconds", "greater than or equal to 0"),
        ({"delay_seconds": 10**12}, "delay_seconds", "less than or equal"),
        ({"delay_seconds": "60"}, "delay_seconds", "valid integer"),
        ({"delay_seconds": 1.5}, "delay_seconds", "valid integer"),
        ({"at": "2030-01-01T00:00:00+00:00", "delay_seconds": 60}, "at", "not both"),
        ({"delay_seconds": None}, "delay_seconds", "Give at"),
        ({"replace": "yes"}, "replace", "valid boolean"),
        ({"workflow": "w" * 201}, "workflow", "at most 200"),
        ({"workflow": "a\x00b"}, "workflow", "NUL"),
        ({"check": "test.record\ud800"}, "check", "(?i)unicode"),
        ({"check": ""}, "check", "at least 1"),
        ({"colour": "red"}, "colour", "Unknown field"),
    ],
)
def test_create__bad_input_is_a_400_naming_the_field(api, thing, odd_checks, change, field, message):
    body = task_body(thing)
    body.update(change)
    body = {name: value for name, value in body.items() if value is not None or name == "entity"}
    response = api.post("tasks", body)
    assert_error(response, 400, [field], message)
    assert not FutureJob.objects.exists()


def test_create__an_expectations_name_is_a_400_naming_expect(api, thing, declare):
    """One name, one kind (issue #34): an expectation's jobs start with expect()."""
    declare()
    response = api.post("tasks", task_body(thing, check="test.expect"))
    assert_error(response, 400, ["check"], "is an expectation, not a check: start it .* prescient.expect")
    assert not FutureJob.objects.exists()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "required"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "dictionary or object"),
        ('"text"', "dictionary or object"),
        ("null", "required|dictionary"),
        ("[" * 50_000 + "]" * 50_000, "too large|nested too deeply"),
        ("[" * 20_000, "nested too deeply|not valid JSON"),
        (b"\xff\xfe{", "not valid JSON"),
        ("1" * 5000, "not valid JSON"),
        ('{"check": "' + "x" * MAX_BODY_BYTES + '"}', "too large"),
    ],
)
def test_create__a_body_that_is_not_a_json_object_is_a_400(api, raw, message):
    response = api.post("tasks", raw=raw)
    assert_error(response, 400, ["body"], message)


def test_create__a_body_beyond_django_s_upload_limit_is_a_400(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = api.post("tasks", raw='{"check": "' + "x" * 2000 + '"}')
    assert_error(response, 400, ["body"], "too large")


def test_create__an_existing_running_job_cannot_be_replaced(api, make_job, thing):
    make_job("test.record", thing=thing, state=State.RUNNING, reserved_by="w", reserved_at=timezone.now())
    response = api.post("tasks", task_body(thing, delay_seconds=7200, replace=True))
    assert_error(response, 409, message="'sleep' is not allowed")


# --- authentication and permissions -----------------------------------------------------------


ENDPOINTS = [
    ("post", "tasks", "add_futurejob"),
    ("get", "tasks", "view_futurejob"),
    ("get", "tasks/1", "view_futurejob"),
    ("post", "tasks/1/pause", "change_futurejob"),
    ("post", "tasks/1/release", "change_futurejob"),
    ("post", "tasks/1/run", "change_futurejob"),
    ("post", "tasks/1/kill", "change_futurejob"),
    ("post", "tasks/1/sleep", "change_futurejob"),
    ("post", "workflows/w/pause", "change_futurejob"),
    ("post", "workflows/w/release", "change_futurejob"),
    ("get", "history", "view_jobhistory"),
    ("get", "health", "view_futurejob"),
]


@pytest.mark.parametrize(("method", "path", "perm"), ENDPOINTS)
@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "Authentication required"),
        ("Bearer pst_not-a-real-token", "not valid"),
        ("Bearer ", "Use the header"),
        ("Token abc", "Use the header"),
        ("Bearer " + "x" * 500, "not valid"),
    ],
)
def test_auth__no_or_bad_credentials_are_a_401(method, path, perm, header, message):
    headers = {} if header is None else {"Authorization": header}
    response = Api().call(method, path, {}, headers=headers)
    assert_error(response, 401, message=message)
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path", "perm"), ENDPOINTS)
def test_auth__each_endpoint_needs_its_permission(method, path, perm, thing):
    others = [p for p in ALL_PERMS if p != perm]
    without = Api(make_token(make_user("without", others)))
    assert_error(without.call(method, path, {}), 403, message=f"prescient.{perm}")
    only = Api(make_token(make_user("only", [perm])))
    assert only.call(method, path, {}).status_code not in (401, 403)


def test_auth__a_superuser_has_every_permission(thing):
    boss = get_user_model().objects.create_superuser(username="boss", password=None)
    api = Api(make_token(boss))
    assert api.post("tasks", task_body(thing)).status_code == 201
    assert api.get("history").status_code == 200


def test_auth__an_inactive_user_s_token_is_a_401(user, thing):
    api = Api(make_token(user))
    user.is_active = False
    user.save()
    assert_error(api.get("tasks"), 401, message="not valid")


def test_auth__session_reads_without_csrf_but_writes_need_it(user, thing):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    api = Api(client=client)
    assert api.get("tasks").status_code == 200
    assert_error(api.post("tasks", task_body(thing)), 403, message="CSRF")
    client.get("/admin/login/")  # sets the csrftoken cookie
    csrf = client.cookies["csrftoken"].value
    response = api.post("tasks", task_body(thing), headers={"X-CSRFToken": csrf})
    assert response.status_code == 201, response.content


def test_auth__a_bad_token_does_not_fall_back_to_the_session(user):
    client = Client()
    client.force_login(user)
    assert Api(client=client).get("tasks").status_code == 200
    assert_error(Api("pst_wrong", client=client).get("tasks"), 401)


def test_auth__token_use_is_recorded_at_most_once_a_minute(user):
    secret = make_token(user)
    api = Api(secret)
    api.get("tasks")
    token = ApiToken.objects.get()
    first = token.last_used_at
    assert first is not None
    api.get("tasks")
    token.refresh_from_db()
    assert token.last_used_at == first


def test_tokens__only_the_digest_is_stored(user):
    token, secret = tokens.issue(user, "svc", checks=["test.record"], now=timezone.now())
    assert secret.startswith("pst_") and len(secret) > 40
    assert token.digest == tokens.digest(secret) and secret not in (token.digest, token.prefix)
    assert secret.startswith(token.prefix)
    with pytest.raises(ValueError, match="needs a scope"):
        tokens.issue(user, "svc", now=timezone.now())


# --- token scope ------------------------------------------------------------------------------


@pytest.fixture
def other_check(register):
    register("api.other", lambda obj, job: None)
    return "api.other"


def test_scope__a_token_for_one_check_cannot_create_or_steer_jobs_of_another(user, other_check, make_job, thing):
    scoped = Api(make_token(user, checks=["test.record"]))
    theirs = make_job(other_check, thing=thing)

    assert_error(
        scoped.post("tasks", task_body(thing, check=other_check)), 403, ["check"],
        "may not act on the check 'api.other'",
    )
    assert_error(scoped.post("tasks", task_body(thing, check="no.such.check")), 403, ["check"])
    for verb in ("pause", "release", "run"):
        assert_error(scoped.post(f"tasks/{theirs.pk}/{verb}"), 404)
    assert_error(scoped.post(f"tasks/{theirs.pk}/kill", {"reason": "mine now"}), 404)
    assert_error(scoped.get(f"tasks/{theirs.pk}"), 404)
    assert_error(scoped.post("workflows/any/pause"), 403, message="all checks")
    assert FutureJob.objects.get(pk=theirs.pk).state == State.SCHEDULED
    assert FutureJob.objects.count() == 1

    # Its own check is fine.
    mine = scoped.post("tasks", task_body(thing, check="test.record"))
    assert mine.status_code == 201
    assert scoped.post(f"tasks/{mine.json()['id']}/pause").json()["state"] == "paused"


def test_scope__lists_history_and_health_show_only_the_token_s_checks(user, other_check, make_job, make_thing):
    now = timezone.now()
    make_job("test.record", next_check_at=now - timedelta(hours=2))
    theirs = make_job(other_check, next_check_at=now - timedelta(hours=5))
    services.kill(theirs.pk, "gone", now=now)
    make_job(other_check, next_check_at=now - timedelta(hours=5))
    scoped = Api(make_token(user, checks=["test.record"]))

    assert {job["check"] for job in scoped.get("tasks").json()["items"]} == {"test.record"}
    assert scoped.get("tasks", check=other_check).json()["items"] == []
    assert scoped.get("history").json()["items"] == []
    health = scoped.get("health").json()
    assert health["overdue_jobs"] == 1
    assert 2 * 3600 - 60 < health["lateness_seconds"] < 2 * 3600 + 60

    everything = Api(make_token(user))
    assert len(everything.get("tasks").json()["items"]) == 2
    assert len(everything.get("history").json()["items"]) == 1
    assert everything.get("health").json()["overdue_jobs"] == 2


# --- GET tasks, GET tasks/{id} ----------------------------------------------------------------


def test_list__filters_by_state_check_workflow_and_entity(api, register, make_job, make_thing):
    register("api.other", lambda obj, job: None)
    a, b = make_thing(), make_thing()
    j1 = make_job("test.record", thing=a, workflow="w1")
    j2 = make_job("test.record", thing=b, state=State.PAUSED, last_state=State.SCHEDULED)
    j3 = make_job("api.other", thing=a, workflow="w1")

    def ids(**query):
        response = api.get("tasks", **query)
        assert response.status_code == 200, response.content
        return [job["id"] for job in response.json()["items"]]

    assert ids() == [j1.pk, j2.pk, j3.pk]
    assert ids(state="paused") == [j2.pk]
    assert ids(check="api.other") == [j3.pk]
    assert ids(workflow="w1") == [j1.pk, j3.pk]
    assert ids(workflow="") == [j2.pk]
    assert ids(entity="testapp.thing") == [j1.pk, j2.pk, j3.pk]
    assert ids(entity=f"testapp.Thing:{a.pk}") == [j1.pk, j3.pk]
    assert ids(entity=f"testapp.thing#{a.pk}") == [j1.pk, j3.pk]  # the notation before 0.4, still read
    assert ids(entity="testapp.other") == []
    assert ids(state="scheduled", workflow="w1", check="test.record") == [j1.pk]


def test_list__pages_with_a_cursor(api, make_job, make_thing):
    jobs = [make_job("test.record") for _ in range(5)]
    seen, cursor, pages = [], None, 0
    while True:
        query = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = api.get("tasks", **query).json()
        seen += [job["id"] for job in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [job.pk for job in jobs]
    assert pages == 3


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"state": "sleeping"}, "state"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "aWQ6LTE"}, "cursor"),  # "id:-1"
        ({"cursor": "%%%"}, "cursor"),
        ({"check": "x" * 201}, "check"),
        ({"workflow": "a\x00"}, "workflow"),
    ],
)
def test_list__bad_filters_are_a_400(api, query, field):
    assert_error(api.get("tasks", **query), 400, [field])


def test_get__one_job_or_404(api, make_job):
    job = make_job("test.record", last_error="boom")
    response = api.get(f"tasks/{job.pk}")
    assert response.status_code == 200
    payload = response.json()
    assert payload["id"] == job.pk and payload["last_error"] == "boom" and payload["in_flight"] is False
    assert_error(api.get(f"tasks/{job.pk + 1}"), 404, message="history")
    assert_error(api.get("tasks/0"), 404)
    assert_error(api.get("tasks/-3"), 404)
    assert_error(api.get(f"tasks/{2**64}"), 404)
    assert_error(api.get("tasks/abc"), 400, ["job_id"])


# --- steering ---------------------------------------------------------------------------------


def test_pause_and_release__a_scheduled_job(api, make_job):
    job = make_job("test.record")
    paused = api.post(f"tasks/{job.pk}/pause")
    assert paused.status_code == 200
    assert (paused.json()["state"], paused.json()["last_state"]) == ("paused", "scheduled")
    assert api.post(f"tasks/{job.pk}/pause").json()["state"] == "paused"  # idempotent
    released = api.post(f"tasks/{job.pk}/release")
    assert (released.json()["state"], released.json()["last_state"]) == ("scheduled", None)
    assert api.post(f"tasks/{job.pk}/release").json()["state"] == "scheduled"  # idempotent


def test_run__makes_a_job_due_now(api, make_job):
    job = make_job("test.record", next_check_at=timezone.now() + timedelta(days=3))
    before = timezone.now()
    response = api.post(f"tasks/{job.pk}/run")
    assert response.status_code == 200
    assert before <= FutureJob.objects.get(pk=job.pk).next_check_at <= timezone.now()


def test_kill__ends_the_job_with_its_reason(api, make_job):
    job = make_job("test.record")
    response = api.post(f"tasks/{job.pk}/kill", {"reason": "  customer left  "})
    assert response.status_code == 200
    assert response.json() == {"id": job.pk, "result": "ended"}
    row = JobHistory.objects.get(job_id=job.pk)
    assert (row.outcome, row.reason) == (Outcome.KILLED, "customer left")
    assert_error(api.get(f"tasks/{job.pk}"), 404)
    assert_error(api.post(f"tasks/{job.pk}/kill", {"reason": "again"}), 404)


def test_kill__a_job_in_flight_is_requested(api, make_job):
    job = make_job("test.record", state=State.RUNNING, reserved_by="w", reserved_at=timezone.now())
    assert api.post(f"tasks/{job.pk}/kill", {"reason": "stop"}).json() == {"id": job.pk, "result": "requested"}
    assert FutureJob.objects.get(pk=job.pk).end_requested == Outcome.KILLED
    assert api.get(f"tasks/{job.pk}").json()["end_requested"] == "killed"


def test_a_reserved_job__is_listed_as_reserved_and_a_kill_ends_it_at_once(api, make_job):
    job = make_job("test.record", state=State.RESERVED, reserved_by="w/1/1", reserved_at=timezone.now())
    listed = api.get("tasks", state="reserved").json()["items"]
    assert [(item["id"], item["state"]) for item in listed] == [(job.pk, "reserved")]
    assert api.get(f"tasks/{job.pk}").json()["state"] == "reserved"
    assert api.post(f"tasks/{job.pk}/kill", {"reason": "stop"}).json() == {"id": job.pk, "result": "ended"}
    assert JobHistory.objects.get(job_id=job.pk).outcome == Outcome.KILLED


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "reason"), ({"reason": "   "}, "reason"), ({"reason": 5}, "reason"),
        ({"reason": "x", "force": True}, "force"),
    ],
)
def test_kill__needs_a_reason(api, make_job, body, field):
    job = make_job("test.record")
    assert_error(api.post(f"tasks/{job.pk}/kill", body), 400, [field])
    assert FutureJob.objects.filter(pk=job.pk).exists()


REFUSED = [
    (State.BURIED, "pause"),
    (State.BURIED, "release"),
    (State.RUNNING, "run"),
]


@pytest.mark.parametrize(("state", "verb"), REFUSED)
def test_steer__a_move_the_state_machine_refuses_is_a_409(api, make_job, state, verb):
    fields = {"reserved_by": "w", "reserved_at": timezone.now()} if state == State.RUNNING else {}
    if state == State.PAUSED:
        fields["last_state"] = State.SCHEDULED
    job = make_job("test.record", state=state, **fields)
    payload = assert_error(api.post(f"tasks/{job.pk}/{verb}"), 409)
    assert f"Job {job.pk} is {state.value}" in payload["message"]
    assert FutureJob.objects.get(pk=job.pk).state == state


def test_steer__unknown_ids_are_a_404(api):
    for verb in ("pause", "release", "run"):
        assert_error(api.post(f"tasks/424242/{verb}"), 404)
    assert_error(api.post("tasks/424242/kill", {"reason": "x"}), 404)


# --- workflows --------------------------------------------------------------------------------


def test_workflows__pause_and_release_every_job(api, make_job):
    jobs = [make_job("test.record", workflow="batch-7") for _ in range(3)]
    make_job("test.record", workflow="other")
    paused = api.post("workflows/batch-7/pause")
    assert paused.status_code == 200
    assert paused.json() == {"name": "batch-7", "paused": True, "changed": 3}
    assert Workflow.objects.get(name="batch-7").is_paused
    assert api.post("workflows/batch-7/pause").json()["changed"] == 0
    assert set(FutureJob.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {"paused"}
    assert api.post("workflows/batch-7/release").json() == {"name": "batch-7", "paused": False, "changed": 3}
    assert FutureJob.objects.filter(state=State.PAUSED).count() == 0


def test_workflows__bad_names_are_a_400(api):
    assert_error(api.post("workflows/" + "w" * 201 + "/pause"), 400, ["name"])
    assert_error(api.post("workflows/%20/pause"), 400, ["name"])


# --- history ----------------------------------------------------------------------------------


def test_history__filters_and_pages(api, make_job, make_thing):
    now = timezone.now()
    a = make_thing()
    ended = []
    for i in range(4):
        job = make_job("test.record", thing=a if i < 2 else None, workflow="w" if i % 2 else "")
        services.kill(job.pk, f"reason {i}", now=now)
        ended.append(job.pk)

    def job_ids(**query):
        response = api.get("history", **query)
        assert response.status_code == 200, response.content
        return [row["job_id"] for row in response.json()["items"]]

    assert job_ids() == ended[::-1]
    assert job_ids(entity=f"testapp.thing:{a.pk}") == ended[:2][::-1]
    assert job_ids(workflow="w") == [ended[3], ended[1]]
    assert job_ids(job_id=ended[0]) == [ended[0]]
    assert job_ids(outcome="killed", check="test.record", limit=1) == [ended[3]]
    assert job_ids(outcome="completed") == []
    row = api.get("history", job_id=ended[0]).json()["items"][0]
    assert row["reason"] == "reason 0" and row["outcome"] == "killed" and row["asked_check_at"] is None

    page = api.get("history", limit=3).json()
    assert len(page["items"]) == 3
    rest = api.get("history", limit=3, cursor=page["next_cursor"]).json()
    assert [r["job_id"] for r in rest["items"]] == [ended[0]] and rest["next_cursor"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"outcome": "exploded"}, "outcome"), ({"job_id": 0}, "job_id"), ({"job_id": 2**64}, "job_id"),
        ({"cursor": "zz"}, "cursor"),
    ],
)
def test_history__bad_filters_are_a_400(api, query, field):
    assert_error(api.get("history", **query), 400, [field])


# --- health -----------------------------------------------------------------------------------


def test_health__database_workers_and_lateness(api, make_job):
    now = timezone.now()
    assert api.get("health").json() | {"checked_at": None} == {
        "status": "ok", "database": True, "workers_alive": 0, "overdue_jobs": 0,
        "oldest_overdue_at": None, "lateness_seconds": None, "checked_at": None,
    }
    worker = {"hostname": "h", "pid": 1, "started_at": now}
    Worker.objects.create(name="alive", heartbeat_at=now - timedelta(seconds=5), **worker)
    Worker.objects.create(name="silent", heartbeat_at=now - timedelta(hours=1), **worker)
    Worker.objects.create(name="stopped", heartbeat_at=now, stopped_at=now, **worker)
    make_job("test.record", next_check_at=now - timedelta(minutes=5))
    make_job("test.record", next_check_at=now + timedelta(minutes=5))
    make_job("test.record", state=State.PAUSED, next_check_at=now - timedelta(days=1))

    health = api.get("health").json()
    assert (health["status"], health["workers_alive"], health["overdue_jobs"]) == ("ok", 1, 1)
    assert 5 * 60 - 30 < health["lateness_seconds"] < 5 * 60 + 30

    make_job("test.record", next_check_at=now - timedelta(minutes=16))
    health = api.get("health").json()
    assert (health["status"], health["overdue_jobs"]) == ("late", 2)


def test_health__an_unreachable_database_is_a_503(api, monkeypatch):
    from django.db import OperationalError
    from django.db.models import QuerySet

    def broken(self):
        raise OperationalError("connection refused")

    secret = api.secret
    api.get("health")  # authenticate once for real
    monkeypatch.setattr(QuerySet, "count", broken)
    response = Api(secret).get("health")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable" and response.json()["database"] is False


def test_errors__a_database_outage_elsewhere_is_a_503_not_a_500(api, monkeypatch):
    from django.db import OperationalError

    def broken(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(tokens, "authenticate", broken)
    payload = assert_error(api.get("tasks"), 503, message="database")
    assert payload["code"] == "unavailable"


# --- other paths and methods ------------------------------------------------------------------


def test_routes__unknown_paths_are_a_json_404_and_wrong_methods_a_json_405(api):
    assert_error(api.get("nothing/here"), 404)
    assert_error(api.get("tasks/"), 404)
    response = api.call("delete", "tasks")
    assert_error(response, 405)
    assert set(response["Allow"].split(", ")) == {"GET", "POST"}
    assert_error(api.get("tasks/1/pause"), 405)


def test_routes__a_post_to_an_unknown_path_is_a_json_404_even_with_csrf_enforced(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    for path in ("nothing", "workflows//pause", "tasks/1/pause/more"):
        assert_error(Api(client=client).post(path), 404)
        assert_error(Api(make_token(user)).post(path), 404)


def test_openapi__the_document_describes_every_endpoint():
    response = Client().get(URL + "openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    jobs = {"/prescient/jobs", "/prescient/jobs/{job_id}", *(
        f"/prescient/jobs/{{job_id}}/{verb}" for verb in ("pause", "release", "run", "kill", "sleep", "cancel"))}
    assert set(paths) == jobs | {path.replace("/jobs", "/tasks") for path in jobs} | {
        "/prescient/workflows/{name}/pause", "/prescient/workflows/{name}/release",
        "/prescient/history", "/prescient/health", "/prescient/schedules", "/prescient/schedules/{name}",
        "/prescient/schedules/{name}/pause", "/prescient/schedules/{name}/resume", "/prescient/expectations",
        "/prescient/expectations/{name}/sla", "/prescient/history/{history_id}/rerun", "/prescient/health/checks",
    }
    for path in jobs:  # the old paths answer, marked deprecated, under their old operation ids
        for method, operation in paths[path.replace("/jobs", "/tasks")].items():
            assert operation["deprecated"] is True
            assert operation["operationId"] == paths[path][method]["operationId"].replace("job", "task")
            assert not paths[path][method].get("deprecated")
    schemes = document["components"]["securitySchemes"]
    assert schemes["BearerToken"]["scheme"] == "bearer"
    assert schemes["SessionCookie"]["in"] == "cookie"
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert operation["security"], (method, path)
            assert "401" in operation["responses"] and "403" in operation["responses"], (method, path)
    assert Client().get(URL + "docs").status_code == 200


# --- the token life cycle, through the admin --------------------------------------------------


def admin_client(user):
    client = Client()
    client.force_login(user)
    return client


def test_token_life_cycle__created_in_the_admin_shown_once_works_then_revoked(user, thing):
    boss = get_user_model().objects.create_superuser(username="boss", password=None)
    client = admin_client(boss)
    response = client.post(
        "/admin/prescient/apitoken/add/",
        {"name": "billing", "user": user.pk, "checks": ["test.record"]},
    )
    token = ApiToken.objects.get()
    created = f"/admin/prescient/apitoken/{token.pk}/created/"
    assert (response.status_code, response["Location"]) == (302, created)  # POST/redirect/GET
    response = client.get(created)
    assert response.status_code == 200, response.content
    assert "no-store" in response["Cache-Control"]
    content = response.content.decode()
    secret = re.search(r'value="(pst_[\w-]+)"', content).group(1)
    assert (token.user, token.checks, token.all_checks) == (user, ["test.record"], False)
    assert token.digest == tokens.digest(secret)
    # The admin's own breadcrumbs (Django 6: a list), down to the token's page.
    assert ('<ol class="breadcrumbs">' if django.VERSION >= (6, 0) else '<div class="breadcrumbs">') in content
    assert f'<a href="/admin/prescient/apitoken/{token.pk}/change/">{token}</a>' in content

    # Shown once: a refresh creates no second token and shows the secret no more; neither do
    # the list and the token's page.
    response = client.get(created, follow=True)
    assert response.redirect_chain == [(f"/admin/prescient/apitoken/{token.pk}/change/", 302)]
    assert "shown only once" in response.content.decode()
    assert ApiToken.objects.count() == 1
    for page in (created, "/admin/prescient/apitoken/", f"/admin/prescient/apitoken/{token.pk}/change/"):
        content = client.get(page, follow=True).content.decode()
        assert token.prefix in content and secret not in content

    api = Api(secret)
    assert api.post("tasks", task_body(thing)).status_code == 201
    assert api.get("tasks").status_code == 200

    response = client.post(
        "/admin/prescient/apitoken/", {"action": "revoke_tokens", "_selected_action": [token.pk]}, follow=True
    )
    assert "Revoked 1 token." in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert_error(api.get("tasks"), 401, message="revoked")
    assert_error(api.post("tasks", task_body(thing)), 401)


def test_token_admin__the_scope_must_be_explicit(user):
    client = admin_client(get_user_model().objects.create_superuser(username="boss", password=None))
    response = client.post("/admin/prescient/apitoken/add/", {"name": "x", "user": user.pk})
    assert "Pick the checks this token may act on" in response.content.decode()
    response = client.post(
        "/admin/prescient/apitoken/add/", {"name": "x", "user": user.pk, "all_checks": "on", "checks": ["test.record"]}
    )
    assert "not both" in response.content.decode()
    assert not ApiToken.objects.exists()
    response = client.post("/admin/prescient/apitoken/add/", {"name": "x", "user": user.pk, "all_checks": "on"})
    assert response.status_code == 302 and ApiToken.objects.get().all_checks


def test_token_admin__staff_can_only_make_tokens_for_themselves(user):
    staff = make_user("staff", [], is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["add_apitoken", "view_apitoken"]))
    client = admin_client(staff)
    response = client.post("/admin/prescient/apitoken/add/", {"name": "x", "user": user.pk, "all_checks": "on"})
    assert not ApiToken.objects.exists()
    assert "Select a valid choice" in response.content.decode()
    response = client.post("/admin/prescient/apitoken/add/", {"name": "x", "user": staff.pk, "all_checks": "on"})
    assert ApiToken.objects.get().user == staff


def test_token_admin__staff_see_and_revoke_only_their_own_tokens(user):
    staff = make_user("staff", [], is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_apitoken", "change_apitoken"]))
    mine, _ = tokens.issue(staff, "mine", all_checks=True, now=timezone.now())
    theirs, _ = tokens.issue(user, "theirs", all_checks=True, now=timezone.now())
    client = admin_client(staff)
    content = client.get("/admin/prescient/apitoken/").content.decode()
    assert mine.prefix in content and theirs.prefix not in content
    assert client.get(f"/admin/prescient/apitoken/{theirs.pk}/change/").status_code == 302  # "doesn't exist"
    client.post("/admin/prescient/apitoken/", {"action": "revoke_tokens", "_selected_action": [mine.pk, theirs.pk]})
    assert list(ApiToken.objects.filter(revoked_at__isnull=False)) == [mine]


def test_typos__unknown_workflow_and_check_name_the_closest(api, make_job, make_thing):
    make_job("test.record", workflow="batch-7")
    expected = "There is no workflow named 'batch-8'. Did you mean 'batch-7'?"
    assert_error(api.post("workflows/batch-8/pause"), 404, message=re.escape(expected))
    assert not Workflow.objects.filter(name="batch-8").exists()
    response = api.post("tasks", task_body(make_thing(), check="test.recrod"))
    expected = "Unknown check 'test.recrod'. Did you mean 'test.record'?"
    assert_error(response, 400, ["check"], message=re.escape(expected))


def test_jobs_paths__answer_and_the_deprecated_tasks_paths_answer_the_same(api, thing):
    """#35 item 4: live jobs are at jobs/…; the tasks/… of versions before 0.4 still answer
    (deprecated, until 0.5)."""
    body = {"check": "test.record", "entity": {"model": "testapp.thing", "key": str(thing.pk)}, "delay_seconds": 3600}
    created = api.post("jobs", body)
    assert created.status_code == 201, created.content
    job_id = created.json()["id"]
    assert api.post("tasks", body).status_code == 200  # the same pending job, by the old path
    for prefix in ("jobs", "tasks"):
        assert api.get(prefix).json()["items"][0]["id"] == job_id
        assert api.get(f"{prefix}/{job_id}").json()["entity"]["key"] == str(thing.pk)
    assert api.post(f"jobs/{job_id}/pause").json()["state"] == "paused"
    assert api.post(f"tasks/{job_id}/release").json()["state"] == "scheduled"
