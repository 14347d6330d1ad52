"""The JSON API's recurring schedules: create (and update), list, get, pause, resume, delete;
validation and errors in the API's one shape, permissions of the Schedule model, token scopes."""

from __future__ import annotations

from datetime import timedelta

import pytest

import prescient
from prescient import cron
from prescient.models import FutureJob, Occurrence, Schedule

from .test_views import Api, assert_error, make_token, make_user

pytestmark = pytest.mark.django_db

SCHEDULE_PERMS = ["view_schedule", "add_schedule", "change_schedule", "delete_schedule"]


@pytest.fixture
def user():
    return make_user("scheduler", perms=SCHEDULE_PERMS)


@pytest.fixture
def api(user):
    return Api(make_token(user))


@pytest.fixture
def thing(make_thing):
    return make_thing()


def body(thing, name="thing.nightly", **fields):
    payload = {
        "name": name, "check": "test.record", "entity": {"model": "testapp.thing", "key": str(thing.pk)},
        "cron": "30 2 * * *", "timezone": "Europe/Berlin",
    }
    payload.update(fields)
    return {key: value for key, value in payload.items() if value is not None}


def iso(at):
    return at.isoformat().replace("+00:00", "Z")


# --- create -----------------------------------------------------------------------------------


def test_create__201_with_the_schedule_and_its_next_five_occurrences(api, thing):
    response = api.post("schedules", body(thing, catch_up="skip", workflow="nightly"))
    assert response.status_code == 201, response.content
    out = response.json()
    row = Schedule.objects.get(name="thing.nightly")
    assert (row.job_exec, row.entity_name, row.entity_key) == ("test.record", "testapp.thing", str(thing.pk))
    assert (row.cron, row.every_seconds, row.timezone, row.catch_up, row.workflow) == (
        "30 2 * * *", None, "Europe/Berlin", "skip", "nightly"
    )
    assert row.next_at == cron.next_cron("30 2 * * *", "Europe/Berlin", row.created_at)
    assert out["entity"] == {"model": "testapp.thing", "key": str(thing.pk)}
    assert (out["kind"], out["check"], out["cron"]) == ("check", "test.record", "30 2 * * *")
    assert out["every_seconds"] is None
    assert out["when"] == cron.in_words("30 2 * * *", None, "Europe/Berlin")
    assert out["next_at"] == iso(row.next_at) and out["due_at"] == iso(row.due_at)
    assert out["upcoming"] == [iso(at) for at in prescient.engine.recurring.upcoming(row)]
    assert len(out["upcoming"]) == 5
    assert (out["paused"], out["declared"], out["runs"], out["skipped"], out["missed"]) == (False, False, 0, 0, 0)
    assert FutureJob.objects.count() == 0  # nothing runs before its first occurrence


def test_create__every_seconds_counts_from_the_epoch(api, thing):
    response = api.post("schedules", body(thing, cron=None, every_seconds=6 * 3600, timezone=None))
    assert response.status_code == 201, response.content
    row = Schedule.objects.get()
    assert (row.cron, row.every_seconds, row.timezone) == ("", 6 * 3600, "UTC")
    assert row.next_at == cron.next_every(timedelta(hours=6), row.created_at)
    assert response.json()["cron"] is None


def test_create__the_same_name_again_updates_it_and_keeps_its_counters(api, thing, make_thing):
    api.post("schedules", body(thing))
    Schedule.objects.update(runs=3)
    other = make_thing()
    response = api.post("schedules", body(other, cron="0 9 * * MON", timezone="America/New_York"))
    assert response.status_code == 200, response.content
    row = Schedule.objects.get()
    assert (row.entity_key, row.cron, row.timezone, row.runs) == (str(other.pk), "0 9 * * MON", "America/New_York", 3)


def test_create__updating_needs_the_change_permission(thing):
    adder = Api(make_token(make_user("adder", perms=["add_schedule"])))
    assert adder.post("schedules", body(thing)).status_code == 201
    assert_error(adder.post("schedules", body(thing, cron="0 3 * * *")), 403, message="change_schedule")
    assert Schedule.objects.get().cron == "30 2 * * *"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "invalid minute field"),
        ({"cron": "0 9 * *"}, "cron", "has 4 fields"),
        ({"cron": "0 0 31 2 *"}, "cron", ""),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"timezone": "../../etc/passwd"}, "timezone", "Unknown time zone"),
        ({"every_seconds": 3600}, "every_seconds", "not both"),
        ({"cron": None}, "cron", "neither"),
        ({"cron": None, "every_seconds": 60}, "every_seconds", "under one slot"),
        ({"catch_up": "all"}, "catch_up", "task schedules"),
        ({"catch_up": "sometimes"}, "catch_up", ""),
        ({"check": "nope"}, "check", "Unknown check"),
        ({"entity": {"model": "testapp.other", "key": "1"}}, "entity.model", "about testapp.thing"),
        ({"entity": {"model": "testapp.thing", "key": "424242"}}, "entity.key", "No testapp.thing"),
        ({"name": "a/b"}, "name", "no '/'"),
        ({"name": "  "}, "name", ""),
        ({"name": "x" * 201}, "name", ""),
        ({"task": "prescient.tasks.retry"}, "task", "Unknown field"),
    ],
)
def test_create__bad_input_is_a_400_naming_the_field_and_writes_nothing(api, thing, fields, field, message):
    assert_error(api.post("schedules", body(thing, **fields)), 400, [field], message or None)
    assert not Schedule.objects.exists()


def test_create__a_check_without_a_model_cannot_be_scheduled(api, thing, register):
    register("test.no_model", lambda obj, job: None, model=None)
    assert_error(api.post("schedules", body(thing, check="test.no_model")), 400, ["check"], "names no model")


def test_create__a_declared_schedule_cannot_be_changed_here(api, thing, t0):
    prescient.recurring("thing.nightly", check="test.record", entity=thing, cron="0 1 * * *", now=t0)
    Schedule.objects.update(declared=True)
    assert_error(api.post("schedules", body(thing)), 409, message="declared in code")
    assert Schedule.objects.get().cron == "0 1 * * *"


# --- list and get -----------------------------------------------------------------------------


def test_list__pages_and_filters(api, make_thing, t0):
    things = [make_thing() for _ in range(3)]
    for index, thing in enumerate(things):
        prescient.recurring(f"s{index}", check="test.record", entity=thing, every=timedelta(hours=1), now=t0)
    prescient.engine.recurring.pause("s1", now=t0)
    first = api.get("schedules", limit=2).json()
    assert [s["name"] for s in first["items"]] == ["s0", "s1"]
    second = api.get("schedules", limit=2, cursor=first["next_cursor"]).json()
    assert ([s["name"] for s in second["items"]], second["next_cursor"]) == (["s2"], None)
    assert "upcoming" not in first["items"][0]
    assert [s["name"] for s in api.get("schedules", paused="true").json()["items"]] == ["s1"]
    assert [s["name"] for s in api.get("schedules", entity=f"testapp.thing:{things[2].pk}").json()["items"]] == ["s2"]
    assert api.get("schedules", check="other").json()["items"] == []
    assert_error(api.get("schedules", cursor="nope"), 400, ["cursor"])


def test_get__the_schedule_with_its_next_five_occurrences(api, thing, t0):
    prescient.recurring("thing.nightly", check="test.record", entity=thing, cron="30 2 * * *",
                        timezone="Europe/Berlin", now=t0)
    out = api.get("schedules/thing.nightly").json()
    assert out["upcoming"][:2] == ["2026-11-23T01:30:00Z", "2026-11-24T01:30:00Z"]
    assert out["when"] == "every day at 02:30, Europe/Berlin"


def test_get__an_unknown_name_is_a_404(api):
    assert_error(api.get("schedules/nope"), 404, message="no schedule named 'nope'")
    assert_error(api.post("schedules/nope/pause"), 404)
    assert_error(api.post("schedules/nope/resume"), 404)
    assert_error(api.call("delete", "schedules/nope"), 404)


# --- pause, resume, delete --------------------------------------------------------------------


def test_pause_and_resume__answer_the_schedule_and_change_nothing_the_second_time(api, thing, t0):
    prescient.recurring("thing.nightly", check="test.record", entity=thing, cron="30 2 * * *", now=t0)
    paused = api.post("schedules/thing.nightly/pause")
    assert paused.status_code == 200, paused.content
    assert paused.json()["paused"] is True and paused.json()["paused_at"] is not None
    assert api.post("schedules/thing.nightly/pause").json()["paused_at"] == paused.json()["paused_at"]
    resumed = api.post("schedules/thing.nightly/resume").json()
    row = Schedule.objects.get()
    assert (resumed["paused"], resumed["paused_at"], row.paused_at) == (False, None, None)
    assert row.next_at > t0  # from the first occurrence after the resume
    assert api.post("schedules/thing.nightly/resume").json() == resumed


def test_delete__204_and_the_jobs_it_produced_stay(api, thing, t0):
    prescient.recurring("thing.nightly", check="test.record", entity=thing, every=timedelta(hours=1), now=t0)
    prescient.engine.recurring.produce(t0 + timedelta(hours=1))
    assert FutureJob.objects.count() == 1
    response = api.call("delete", "schedules/thing.nightly")
    assert response.status_code == 204, response.content
    assert not Schedule.objects.exists() and not Occurrence.objects.exists()
    assert FutureJob.objects.count() == 1
    assert_error(api.get("schedules/thing.nightly"), 404)


def test_delete__a_declared_schedule_is_a_409(api, thing, t0):
    prescient.recurring("thing.nightly", check="test.record", entity=thing, cron="0 1 * * *", now=t0)
    Schedule.objects.update(declared=True)
    assert_error(api.call("delete", "schedules/thing.nightly"), 409, message="remove its declaration")
    assert Schedule.objects.exists()


# --- authentication, permissions, scopes ------------------------------------------------------


def test_every_endpoint__401_without_credentials(thing, t0):
    prescient.recurring("s", check="test.record", entity=thing, cron="0 1 * * *", now=t0)
    anonymous = Api()
    for method, path in [("post", "schedules"), ("get", "schedules"), ("get", "schedules/s"),
                         ("post", "schedules/s/pause"), ("post", "schedules/s/resume"), ("delete", "schedules/s")]:
        payload = assert_error(anonymous.call(method, path, body(thing) if path == "schedules" else None), 401)
        assert payload["code"] == "unauthenticated"
    assert Schedule.objects.get().paused_at is None


@pytest.mark.parametrize(
    ("method", "path", "permission"),
    [
        ("post", "schedules", "add_schedule"),
        ("get", "schedules", "view_schedule"),
        ("get", "schedules/s", "view_schedule"),
        ("post", "schedules/s/pause", "change_schedule"),
        ("post", "schedules/s/resume", "change_schedule"),
        ("delete", "schedules/s", "delete_schedule"),
    ],
)
def test_every_endpoint__403_without_its_permission(thing, t0, method, path, permission):
    prescient.recurring("s", check="test.record", entity=thing, cron="0 1 * * *", now=t0)
    others = [perm for perm in SCHEDULE_PERMS if perm != permission]
    # The job permissions do not stand in for the schedule ones.
    api = Api(make_token(make_user("partial", perms=[*others, "view_futurejob", "add_futurejob", "change_futurejob"])))
    new = body(thing, name="other") if path == "schedules" else None
    assert_error(api.call(method, path, new), 403, message=permission)
    assert Schedule.objects.count() == 1 and Schedule.objects.get().paused_at is None


def test_a_scoped_token__sees_and_steers_only_the_schedules_of_its_checks(user, thing, make_thing, t0, register):
    register("test.other", lambda obj, job: None)
    prescient.recurring("mine", check="test.record", entity=thing, cron="0 1 * * *", now=t0)
    prescient.recurring("theirs", check="test.other", entity=thing, cron="0 1 * * *", now=t0)
    api = Api(make_token(user, checks=["test.record"]))
    assert [s["name"] for s in api.get("schedules").json()["items"]] == ["mine"]
    assert_error(api.get("schedules/theirs"), 404)
    assert_error(api.post("schedules/theirs/pause"), 404)
    assert_error(api.call("delete", "schedules/theirs"), 404)
    assert_error(api.post("schedules", body(thing, name="new", check="test.other")), 403, ["check"])
    # Nor may it take over a schedule of another check by its name.
    assert_error(api.post("schedules", body(make_thing(), name="theirs")), 403, ["name"])
    assert Schedule.objects.get(name="theirs").job_exec == "test.other"
    assert api.post("schedules/mine/pause").status_code == 200


def test_a_session__needs_the_csrf_token_to_change_a_schedule(user, thing, t0):
    from django.test import Client

    prescient.recurring("s", check="test.record", entity=thing, cron="0 1 * * *", now=t0)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    session = Api(client=client)
    assert session.get("schedules/s").status_code == 200
    assert_error(session.call("delete", "schedules/s"), 403, message="CSRF")
    assert Schedule.objects.exists()
