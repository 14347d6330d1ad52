"""The worker's LISTEN connection (prescient/runtime/listener.py): opened as Django opens the
alias it names, ``OPTIONS`` included, and on ``PRESCIENT["LISTEN_DATABASE"]`` when it is set
(a direct connection beside a pooler in transaction mode: docs/operations.md, "PgBouncer")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connection, connections, transaction

from prescient.engine import store
from prescient.runtime.listener import Listener, connection_params, listen_alias

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BASE = {"SLOT_MINUTES": 15, "TIMEOUT_SECONDS": 2, "HISTORY_RETENTION_DAYS": None}


def shown(listener: Listener, name: str) -> str:
    """A run-time parameter as the listener's own server session has it."""
    conn = listener.socket()
    assert conn is not None, "the listener did not connect"
    row = conn.execute(f"SHOW {name}").fetchone()
    return str(row[0])


@pytest.fixture
def direct() -> Iterator[str]:
    """The alias "direct": the test database under a second name with OPTIONS of its own (as a
    deployment's direct, session-mode alias beside a pooled default would have)."""
    options = {"application_name": "prescient-direct", "options": "-c statement_timeout=4321"}
    settings.DATABASES["direct"] = connections.settings["direct"] = {
        **connections["default"].settings_dict, "OPTIONS": options,
    }
    try:
        yield "direct"
    finally:
        connections["direct"].close()
        del connections["direct"]
        settings.DATABASES.pop("direct", None)
        connections.settings.pop("direct", None)


def test_the_default_alias__its_options_reach_the_listener(monkeypatch):
    """Before, the listener took NAME, USER, PASSWORD, HOST and PORT and dropped OPTIONS (sslmode
    and the like): now it connects with what Django's own connection is given."""
    options = connection.settings_dict["OPTIONS"]
    monkeypatch.setitem(options, "application_name", "prescient-listener-test")
    monkeypatch.setitem(options, "options", "-c statement_timeout=1234")
    listener = Listener()
    try:
        assert listener.alias == "default"
        assert shown(listener, "application_name") == "prescient-listener-test"
        assert shown(listener, "statement_timeout") == "1234ms"
    finally:
        listener.close()
    params = connection_params("default")
    assert params["application_name"] == "prescient-listener-test"
    assert "cursor_factory" not in params and "context" not in params


def test_listen_database__the_listener_connects_with_that_alias_and_hears_the_default_ones_notify(
    direct, settings
):
    settings.PRESCIENT = {**BASE, "LISTEN_DATABASE": direct}
    assert listen_alias() == direct and Listener.available()
    listener = Listener()
    try:
        assert listener.alias == direct
        assert shown(listener, "application_name") == "prescient-direct"
        assert shown(listener, "statement_timeout") == "4321ms"
        assert listener.drain() == set()
        with transaction.atomic():  # on the default alias, as every writer notifies
            store.notify()
        assert listener.wait(30)
    finally:
        listener.close()


def test_listen_database__none_is_the_default_alias(settings):
    settings.PRESCIENT = {**BASE, "LISTEN_DATABASE": None}
    assert listen_alias() == "default" and Listener().alias == "default"
