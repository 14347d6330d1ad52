from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from prescient import checks as registry
from prescient.clock import db_now
from prescient.maintenance import registered_services
from prescient.models import FutureJob
from prescient.states import State
from tests.testapp.models import Thing

ROOT = Path(__file__).resolve().parent.parent

#: A fixed "now" on a slot boundary: Sunday 2026-11-22 10:00 UTC.
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def upkeep_as_at_a_process_start() -> None:
    """Each test sees the upkeep duties as a fresh process does: their intervals count from the
    process's start, and one that ran out during the run (Declarations: every 5 minutes) would
    otherwise add its queries to whichever test came next (an idle tick is one query)."""
    for service in registered_services():
        type(service).__init__(service)  # its own state too (the pruner's resume, the synced declarations)


@pytest.fixture
def t0() -> datetime:
    return T0


@pytest.fixture
def register() -> Iterator[Callable[..., Any]]:
    """Register a check for one test: ``register("name", func, model=..., **overrides)``."""
    names: list[str] = []

    def add(name: str, func: Callable[..., Any], model: Any = "testapp.Thing", **options: Any) -> Callable[..., Any]:
        registry.unregister(name)
        names.append(name)
        return registry.check(name, model=model, **options)(func)

    yield add
    for name in names:
        registry.unregister(name)


@pytest.fixture
def make_thing() -> Callable[..., Thing]:
    def make(**fields: Any) -> Thing:
        return Thing.objects.create(**fields)

    return make


@pytest.fixture
def make_job(make_thing: Callable[..., Thing]) -> Callable[..., FutureJob]:
    """A job row straight in the table (bypassing schedule), for state tests."""

    def make(
        check: str = "test.record",
        *,
        thing: Thing | None = None,
        state: str = State.SCHEDULED,
        next_check_at: datetime = T0,
        **fields: Any,
    ) -> FutureJob:
        thing = thing or make_thing()
        if fields.get("reserved_by") and "run_started_at" not in fields and state != State.RESERVED:
            fields["run_started_at"] = fields.get("reserved_at")  # a claim whose run has started
        return FutureJob.objects.create(
            entity_name="testapp.thing",
            entity_key=str(thing.pk),
            job_exec=check,
            state=state,
            first_check_at=fields.pop("first_check_at", next_check_at),
            next_check_at=next_check_at,
            created_at=fields.pop("created_at", next_check_at - timedelta(hours=1)),
            **fields,
        )

    return make


@pytest.fixture
def clock() -> datetime:
    """The database's time now: leases and heartbeats are judged by it, not by ``now``."""
    return db_now()


def lose_claims(*pks: int, started: bool = True) -> int:
    """Make the claims of ``pks`` look like those of a process that died an hour ago (by the
    database's clock); ``started``: their runs had begun."""
    old = db_now() - timedelta(hours=1)
    return FutureJob.objects.filter(pk__in=pks).exclude(reserved_by="").update(
        reserved_at=old, run_started_at=old if started else None
    )


def database_env() -> dict[str, str]:
    """Environment for a child process that must use the test database."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        host = settings.get("HOST") or "127.0.0.1"
        port = settings.get("PORT") or 5432
        user = settings.get("USER") or "postgres"
        env["DATABASE_URL"] = f"postgres://{user}@{host}:{port}/{settings['NAME']}"
    else:
        env.pop("DATABASE_URL", None)
        env["PRESCIENT_SQLITE"] = str(settings["NAME"])
    env["PYTHONPATH"] = str(ROOT)
    return env


def manage(*args: str, timeout: float = 120) -> subprocess.Popen[str]:
    """Start ``django-admin <args>`` against the test database, in a new process."""
    return subprocess.Popen(
        [sys.executable, "-m", "django", *args, "--settings=tests.settings"],
        cwd=ROOT,
        env=database_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def declare() -> Iterator[Callable[..., list[tuple[int, int]]]]:
    """Declare an expectation on testapp.Thing for one test: ``declare("name", met=..., ladder=...,
    handler=..., **options)``, by default met by ``status="shipped"`` with rungs at 3, 6 and 24
    hours. Returns the list the default handler appends ``(thing pk, step)`` to."""
    from django.db.models import Q

    import prescient
    from prescient import expectations

    names: list[str] = []

    def add(
        name: str = "test.expect", *, handler: Callable[..., Any] | None = None, met: Any = None,
        ladder: Any = (timedelta(hours=3), timedelta(hours=6), timedelta(hours=24)), **options: Any,
    ) -> list[tuple[int, int]]:
        expectations.unregister(name)
        names.append(name)
        calls: list[tuple[int, int]] = []

        def record(thing: Thing, job: FutureJob, step: int) -> None:
            calls.append((thing.pk, step))

        prescient.expectation(
            name, model=options.pop("model", "testapp.Thing"), met=Q(status="shipped") if met is None else met,
            ladder=list(ladder), **options,
        )(handler or record)
        _sync_save_triggers()
        return calls

    yield add
    for name in names:
        expectations.unregister(name)
    if names:
        _sync_save_triggers(teardown=True)


def _sync_save_triggers(*, teardown: bool = False) -> None:
    """On PostgreSQL, give the watched tables their save triggers as ``migrate`` does for the
    expectations declared at import (here declared by a test), so the expectation tests run on
    the path a deployment takes; SQLite takes the other. Taken off again once the test is done
    (in a test's own transaction its rollback does that)."""
    from django.db import connection

    from prescient.kinds import commit_notices

    if connection.vendor != "postgresql" or (teardown and connection.in_atomic_block):
        return
    try:
        commit_notices.sync()
    except RuntimeError:  # a test without the database: nothing to install
        pass
