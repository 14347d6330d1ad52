"""Fuzzing the JSON API: no input gets a 5xx or an answer its OpenAPI document does not allow.

1. Schemathesis reads ``openapi.json`` from the app and generates requests for every
   operation: valid ones (positive) and ones that break the document (negative). Each answer
   must not be a 5xx, must use a status code and content type the document declares and match
   its schema; negative requests must be refused with a 4xx. It counts the requests it sent
   and needs at least 1,000.
2. Near-valid ``POST tasks`` bodies built from real checks, entities and edge-case times, so
   that the code past validation (lookups, the one-job rule, the slot maths) is fuzzed too.
3. Random sequences of steering calls on jobs in every state (a stateful fuzz).
4. Random ``Authorization`` headers.

Generated strings seldom hold the characters databases refuse (NUL, lone surrogates), so
runs 2 and 3 mix them in. Runs are derandomized (the same requests each time) unless
``PRESCIENT_FUZZ_RANDOM=1``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
import werkzeug.test
from django.contrib.auth import get_user_model
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections, transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from prescient.api import tokens
from prescient.engine import verbs as services
from prescient.states import State

pytestmark = pytest.mark.django_db

#: Requests per operation and generation mode (hypothesis stops sooner when it runs out of cases).
POSITIVE_EXAMPLES = 65
NEGATIVE_EXAMPLES = 40
TARGETED_EXAMPLES = 200
HEADER_EXAMPLES = 100
MINIMUM_REQUESTS = 1000

STEERING_EXAMPLES = 60

#: Strings that databases refuse or that sit on a limit: NUL (PostgreSQL refuses it in text),
#: lone surrogates (not UTF-8), over-long ones. Generated strings contain them too rarely.
NASTY_TEXT = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfff", "x" * 201, "x" * 256, " ", "%00", "../.."])

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
NEGATIVE_CHECKS = [*CHECKS, negative_data_rejection]


def utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=os.environ.get("PRESCIENT_FUZZ_RANDOM") != "1",
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


@pytest.fixture
def app() -> Iterator[WSGIHandler]:
    """The project as a WSGI app that shares the test's database connection and transaction.

    Django closes "old" connections around each request; the test client turns that off, and
    so must a WSGI app served inside a test transaction.
    """
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def auth() -> dict[str, str]:
    """A token of a superuser, allowed all checks."""
    user = get_user_model().objects.create_superuser(username="fuzz", password=None)
    _token, secret = tokens.issue(user, "fuzz", all_checks=True, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def job_ids(make_job: Any) -> list[int]:
    """Live jobs in every state (and with a run in flight), for the steering endpoints."""
    ids = []
    for state in State:
        for workflow in ["w", ""] * 2:
            fields = {"reserved_by": "w", "reserved_at": datetime.now(UTC)} if state == State.RUNNING else {}
            if state == State.PAUSED:
                fields["last_state"] = State.SCHEDULED
            ids.append(make_job("test.record", state=state, workflow=workflow, **fields).pk)
    return ids


def test_fuzz__every_operation_answers_as_its_openapi_document_says(
    app: WSGIHandler, auth: dict[str, str], job_ids: list[int], declare: Any
) -> None:
    declare("test.expect")  # an expectation whose SLA can be asked for
    schema = schemathesis.openapi.from_wsgi("/prescient/openapi.json", app)
    # Credentials come from the fixture; generating Authorization headers only to replace them is slow.
    schema.config.generation.update(with_security_parameters=False)
    sent: dict[str, int] = {}

    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.definition.raw.get("deprecated"):
            continue  # tasks/…: the very views of jobs/…, fuzzed there
        modes = [(GenerationMode.POSITIVE, POSITIVE_EXAMPLES, CHECKS)]
        if operation.body or any(True for _ in operation.iter_parameters()):  # else nothing to break
            modes.append((GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES, NEGATIVE_CHECKS))
        for mode, examples, checks in modes:
            strategy = operation.as_strategy(generation_mode=mode)
            if "{job_id}" in operation.path and mode == GenerationMode.POSITIVE:
                # Random ids are nearly all 404s: send some to the jobs that exist.
                strategy = st.one_of(
                    st.sampled_from(job_ids).flatmap(
                        lambda pk, operation=operation: operation.as_strategy(path_parameters={"job_id": pk})
                    ),
                    strategy,
                )
            if operation.path.endswith("{name}/sla") and mode == GenerationMode.POSITIVE:
                # Random names are nearly all 404s: send some to the declared expectation.
                strategy = st.one_of(operation.as_strategy(path_parameters={"name": "test.expect"}), strategy)

            @fuzz_settings(examples)
            @given(case=strategy)
            def run(case: Any) -> None:
                # run() is called at once, in this iteration: the loop's variables are current.
                response = case.call(headers=auth)
                sent[operation.label] = sent.get(operation.label, 0) + 1  # noqa: B023
                case.validate_response(response, checks=checks, headers=auth)  # noqa: B023

            run()

    total = sum(sent.values())
    print(f"schemathesis sent {total} requests: {sent}")
    # every operation but the deprecated tasks/… aliases: GET expectations and its SLA, cancel, rerun and
    # health/checks included
    assert len(sent) == 23
    assert total >= MINIMUM_REQUESTS


def test_fuzz__near_valid_task_bodies_never_fail(
    app: WSGIHandler, auth: dict[str, str], make_thing: Any, make_job: Any, register: Any
) -> None:
    """Bodies that pass or nearly pass validation, so that the code behind it is exercised:
    lookups, the one-job rule, replace, paused workflows, horizons and the slot maths."""
    register("fuzz.short", lambda obj, job: None, horizon_days=0.5)
    register("fuzz.other_model", lambda obj, job: None, model="testapp.Other")
    register("fuzz.no_model", lambda obj, job: None, model=None)
    things = [make_thing() for _ in range(3)]
    schema = schemathesis.openapi.from_wsgi("/prescient/openapi.json", app)
    operation = schema.find_operation_by_id("create_task")

    make_job("test.record", thing=things[0], state=State.RUNNING, reserved_by="w", reserved_at=datetime.now(UTC))
    services.pause(workflow="paused", create_workflow=True)

    now = datetime.now(UTC).replace(tzinfo=None)
    offsets = st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
    near = st.datetimes(min_value=now - timedelta(days=2), max_value=now + timedelta(days=40), timezones=offsets)
    valid = st.fixed_dictionaries(
        {
            "check": st.sampled_from(["test.record", "fuzz.short"]),
            "entity": st.fixed_dictionaries(
                {
                    "model": st.sampled_from(["testapp.thing", "TestApp.Thing"]),
                    "key": st.sampled_from([str(thing.pk) for thing in things] + [thing.pk for thing in things]),
                }
            ),
        },
        optional={"workflow": st.sampled_from(["", "w", "paused", "ünïcode ✓"]), "replace": st.booleans()},
    )
    due = st.one_of(
        st.fixed_dictionaries({"at": near.map(datetime.isoformat)}),
        st.fixed_dictionaries({"delay_seconds": st.integers(min_value=0, max_value=40 * 86400)}),
    )
    garbage: dict[str, Any] = {
        "check": st.one_of(
            st.sampled_from(["fuzz.other_model", "fuzz.no_model", "nope"]), st.text(max_size=10), NASTY_TEXT
        ),
        "entity": st.one_of(
            st.fixed_dictionaries(
                {"model": st.sampled_from(["testapp.other", "auth.user", "x", ""]), "key": st.just("1")}
            ),
            st.fixed_dictionaries(
                {
                    "model": st.just("testapp.thing"),
                    "key": st.one_of(
                        st.integers(), st.text(max_size=20), NASTY_TEXT,
                        st.sampled_from(["0", "-1", " 1", "1.0", "1e3", str(2**63), str(2**63 - 1), "٣"]),
                    ),
                }
            ),
        ),
        "at": st.one_of(
            st.datetimes(timezones=offsets).map(datetime.isoformat),  # any aware time, year 1 to 9999
            st.datetimes().map(datetime.isoformat),  # naive
            st.sampled_from(["", "now", "2026-13-01T00:00:00Z", "2026-11-22T10:00:00+24:00", "2026-W47-7T10:00Z"]),
            st.text(max_size=30),
        ),
        "delay_seconds": st.one_of(st.integers(), st.floats(), st.text(max_size=5)),
        "workflow": st.one_of(st.text(max_size=12), NASTY_TEXT),
        "replace": st.one_of(st.integers(), st.text(max_size=3), st.none()),
    }

    @st.composite
    def bodies(draw: Any) -> dict[str, Any]:
        body = {**draw(valid), **draw(due)}
        if draw(st.integers(0, 2)) == 0:  # a third of the bodies get one bad field
            field = draw(st.sampled_from(sorted(garbage)))
            body[field] = draw(garbage[field])
        return body

    sent = 0

    @fuzz_settings(TARGETED_EXAMPLES)
    @given(body=bodies())
    def run(body: dict[str, Any]) -> None:
        nonlocal sent
        case = operation.Case(body=body, media_type="application/json")
        response = case.call(headers=auth)
        sent += 1
        assert response.status_code in (200, 201, 400, 409), response.text
        case.validate_response(response, checks=CHECKS, headers=auth)

    run()
    print(f"targeted run sent {sent} requests")
    assert sent >= TARGETED_EXAMPLES * 0.9


def test_fuzz__near_valid_schedule_bodies_and_their_steering_never_fail(
    app: WSGIHandler, auth: dict[str, str], make_thing: Any
) -> None:
    """Schedule bodies with a real check and entity, so that the cron parser, the time zones,
    the slot check and the upsert are fuzzed; each schedule made is then read, paused, resumed
    and deleted. Each sequence is rolled back after."""
    thing = make_thing()
    schema = schemathesis.openapi.from_wsgi("/prescient/openapi.json", app)
    operations = {operation_id: schema.find_operation_by_id(operation_id) for operation_id in (
        "create_schedule", "get_schedule", "pause_schedule", "resume_schedule", "delete_schedule",
    )}
    field = st.one_of(
        st.sampled_from(["*", "*/5", "0", "30", "1-5", "MON", "mon-fri", "L", "?", "1,2", "59", "60", "24", "32",
                         "13", "0-", "*/0", "H", "1#2", "7"]),
        st.text(max_size=4),
    )
    expression = st.one_of(st.lists(field, min_size=4, max_size=6).map(" ".join), st.text(max_size=20), NASTY_TEXT)
    zones = st.one_of(
        st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu", "Etc/GMT+12", "utc",
                         "Europe/berlin", "../zoneinfo/UTC", "/etc/localtime", "Factory", "posixrules", " UTC"]),
        st.text(max_size=12), NASTY_TEXT,
    )
    timing = st.one_of(
        st.fixed_dictionaries({"cron": expression}),
        st.fixed_dictionaries({"every_seconds": st.integers(min_value=-10, max_value=2**31)}),
    )
    bodies = st.builds(
        lambda timing, optional, name: {
            "name": name, "check": "test.record", "entity": {"model": "testapp.thing", "key": thing.pk},
            **timing, **optional,
        },
        timing,
        st.fixed_dictionaries({}, optional={
            "timezone": zones, "catch_up": st.sampled_from(["latest", "skip", "all"]),
            "workflow": st.one_of(st.sampled_from(["", "w"]), NASTY_TEXT),
        }),
        st.one_of(st.sampled_from(["s", "s.1", "ünï ✓"]), st.text(min_size=1, max_size=8).filter(utf8)),
    )
    sent = 0
    statuses = {"created": 0}

    @fuzz_settings(TARGETED_EXAMPLES)
    @given(body=bodies)
    def run(body: dict[str, Any]) -> None:
        nonlocal sent
        with transaction.atomic():
            case = operations["create_schedule"].Case(body=body, media_type="application/json")
            response = case.call(headers=auth)
            sent += 1
            assert response.status_code in (200, 201, 400), response.text
            case.validate_response(response, checks=CHECKS, headers=auth)
            if response.status_code == 201:
                statuses["created"] += 1
                if any(ord(c) < 128 and not (c.isalnum() or c in "._~-") for c in body["name"]):
                    # schemathesis puts path parameters in the URL as they are: ASCII punctuation,
                    # spaces and controls ('?', '#', '%', '/', …) would change the URL rather than
                    # name the schedule. Non-ASCII names are encoded, and steered below.
                    transaction.set_rollback(True)
                    return
                for operation_id in ("get_schedule", "pause_schedule", "resume_schedule", "delete_schedule"):
                    step = operations[operation_id].Case(path_parameters={"name": body["name"]})
                    answer = step.call(headers=auth)
                    assert answer.status_code in (200, 204), answer.text
                    step.validate_response(answer, checks=CHECKS, headers=auth)
            transaction.set_rollback(True)

    run()
    print(f"schedule run sent {sent} requests, {statuses['created']} made a schedule")
    assert sent >= TARGETED_EXAMPLES * 0.9
    assert statuses["created"] >= TARGETED_EXAMPLES // 10  # past validation, not only refused


def test_fuzz__random_steering_of_jobs_in_every_state_never_fails(
    app: WSGIHandler, auth: dict[str, str], make_job: Any, make_thing: Any
) -> None:
    """Sequences of steering calls on jobs in every state, each sequence rolled back after.

    Every answer is one the state machine allows (200, 404 for ended or unknown jobs, 409 for
    refused moves, 400 for bad input) and matches the OpenAPI document.
    """
    schema = schemathesis.openapi.from_wsgi("/prescient/openapi.json", app)
    operations = {operation_id: schema.find_operation_by_id(operation_id) for operation_id in (
        "pause_task", "release_task", "run_task", "kill_task", "get_task", "list_tasks", "list_history",
        "pause_workflow", "release_workflow",
    )}
    things = [make_thing() for _ in range(4)]
    browser = werkzeug.test.Client(app)  # not Django's test client: it would re-enable closing connections
    text = st.one_of(st.text(max_size=12), NASTY_TEXT)
    job = st.integers(min_value=0, max_value=4)  # 4: no such job
    actions = st.one_of(
        st.tuples(st.sampled_from(["pause_task", "release_task", "run_task", "get_task"]), job, st.none()),
        st.tuples(st.just("kill_task"), job, st.one_of(st.just("no longer needed"), text)),
        st.tuples(st.sampled_from(["pause_workflow", "release_workflow"]), st.none(), st.one_of(st.just("w"), text)),
        st.tuples(
            st.sampled_from(["list_tasks", "list_history"]), st.none(),
            st.dictionaries(
                st.sampled_from(["check", "workflow", "entity", "state", "outcome", "cursor"]),
                text.filter(utf8),  # a query string carries UTF-8 only
                max_size=2,
            ),
        ),
    )
    sent = 0

    @fuzz_settings(STEERING_EXAMPLES)
    @given(steps=st.lists(actions, min_size=1, max_size=8))
    def run(steps: list[tuple[str, int | None, Any]]) -> None:
        nonlocal sent
        with transaction.atomic():
            now = datetime.now(UTC)
            ids = [
                make_job(thing=things[0], state=State.SCHEDULED, workflow="w").pk,
                make_job(thing=things[1], state=State.RUNNING, reserved_by="w", reserved_at=now, workflow="w").pk,
                make_job(thing=things[2], state=State.PAUSED, last_state=State.SCHEDULED, workflow="w").pk,
                make_job(thing=things[3], state=State.BURIED).pk,
                2**62,
            ]
            for operation_id, index, argument in steps:
                if operation_id.endswith("_workflow"):  # any name, quoted here ("/" included)
                    verb = operation_id.split("_")[0]
                    name = quote(argument.encode("utf-8", "surrogatepass"), safe="")  # lone surrogates: bad UTF-8
                    raw = browser.post(f"/prescient/workflows/{name}/{verb}", headers=auth)
                    assert raw.status_code in (200, 400, 404), raw.data
                    assert set(raw.get_json()) in (
                        {"name", "paused", "changed"}, {"status", "code", "message", "fields"}
                    )
                else:
                    kwargs: dict[str, Any] = {}
                    if index is not None:
                        kwargs["path_parameters"] = {"job_id": ids[index]}
                    if operation_id == "kill_task":
                        kwargs.update(body={"reason": argument}, media_type="application/json")
                    elif operation_id.startswith("list_"):
                        kwargs["query"] = argument
                    case = operations[operation_id].Case(**kwargs)
                    response = case.call(headers=auth)
                    assert response.status_code in (200, 400, 404, 409), response.text
                    case.validate_response(response, checks=CHECKS, headers=auth)
                sent += 1
            transaction.set_rollback(True)

    run()
    print(f"steering run sent {sent} requests")
    assert sent >= STEERING_EXAMPLES


def test_fuzz__any_authorization_header_is_refused_or_accepted_never_a_5xx(auth: dict[str, str]) -> None:
    """Authorization values the schema run leaves alone (it sends the fixture's token)."""
    client = Client()
    secret = auth["Authorization"].removeprefix("Bearer ")
    latin1 = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
    values = st.one_of(
        st.text(latin1, max_size=300),
        st.text(latin1, max_size=80).map(lambda text: "Bearer " + text),
        st.sampled_from([secret, secret.upper(), secret[:-1], secret + " ", " " + secret, "pst_"]).map(
            lambda s: "Bearer " + s
        ),
        st.sampled_from(["bearer " + secret, "BEARER  " + secret, "Basic " + secret]),
    )
    sent = 0

    @fuzz_settings(HEADER_EXAMPLES)
    @given(value=values, path=st.sampled_from(["tasks", "health", "history", "tasks/1/pause"]))
    def run(value: str, path: str) -> None:
        nonlocal sent
        method = client.post if path.endswith("pause") else client.get
        response = method("/prescient/" + path, headers={"Authorization": value})
        sent += 1
        assert response.status_code in (200, 401, 404), response.content
        payload = response.json()
        if response.status_code == 401:
            assert payload["code"] == "unauthenticated" and response["WWW-Authenticate"].startswith("Bearer")

    run()
    assert sent >= HEADER_EXAMPLES * 0.9
