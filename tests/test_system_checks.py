"""Bad settings are reported by Django's system check framework, naming what was expected."""

import ast
import io
import re
from pathlib import Path

import pytest
from django.core.checks import ERROR, INFO, WARNING, Error, Info, Warning
from django.core.management import call_command
from django.db import connection

from prescient import diagnostics
from prescient.system_checks import (
    api_docs_warnings,
    autovacuum_warnings,
    check_api_docs,
    check_api_over_https,
    check_autovacuum,
    check_registry,
    check_settings,
    check_sqlite,
    server_autovacuum,
    sqlite_warnings,
)


def ids(errors):
    return [e.id for e in errors]


def test_defaults_are_clean(settings):
    settings.PRESCIENT = {}
    assert check_settings() == []
    assert check_registry() == []


@pytest.mark.parametrize("slot", [7, 0, -15, 1.5, "15", True])
def test_slot_that_does_not_divide_a_day(settings, slot):
    settings.PRESCIENT = {"SLOT_MINUTES": slot}
    errors = check_settings()
    assert ids(errors) == ["prescient.E003"]
    assert repr(slot) in errors[0].hint


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("TIMEOUT_SECONDS", 0, "prescient.E004"),
        ("HORIZON_DAYS", "30", "prescient.E004"),
        ("MAX_CHECKS", -1, "prescient.E005"),
        ("MAX_RETRIES", 2.5, "prescient.E005"),
        ("BATCH_SIZE", 0, "prescient.E006"),
        ("STALE_AFTER_SECONDS", -5, "prescient.E007"),
        ("ERROR_HANDLER", "no.such.handler", "prescient.E008"),
        ("SLOTS", 15, "prescient.E002"),
    ],
)
def test_bad_values(settings, key, value, code):
    settings.PRESCIENT = {key: value}
    assert code in ids(check_settings())


def test_not_a_dict(settings):
    settings.PRESCIENT = [("SLOT_MINUTES", 15)]
    assert ids(check_settings()) == ["prescient.E001"]


def test_stale_shorter_than_timeout_warns(settings):
    settings.PRESCIENT = {"TIMEOUT_SECONDS": 60, "STALE_AFTER_SECONDS": 30}
    assert ids(check_settings()) == ["prescient.W001"]


def test_fewer_recent_errors_than_max_crashes_warns(settings):
    settings.PRESCIENT = {"RECENT_ERRORS": 2, "MAX_CRASHES": 3}
    assert ids(check_settings()) == ["prescient.W003"]
    settings.PRESCIENT = {"RECENT_ERRORS": 3, "MAX_CRASHES": 3}
    assert ids(check_settings()) == []


def test_check_naming_a_missing_model(register):
    register("test.ghost", lambda thing, job: None, model="nowhere.Ghost")
    errors = check_registry()
    assert ids(errors) == ["prescient.E010"]
    assert "nowhere.ghost" in errors[0].msg


SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}


@pytest.mark.parametrize(
    "options",
    [None, {}, {"timeout": 20}, {"transaction_mode": "DEFERRED"}, {"init_command": "PRAGMA journal_mode=wal"}],
)
def test_sqlite_without_immediate_transactions__warns_with_the_fix(options):
    database = SQLITE if options is None else {**SQLITE, "OPTIONS": options}
    (warning,) = sqlite_warnings(database)
    assert warning.id == "prescient.W011"
    assert "database is locked" in warning.msg
    assert '"transaction_mode": "IMMEDIATE"' in warning.hint


@pytest.mark.parametrize("mode", ["IMMEDIATE", "immediate", "EXCLUSIVE"])
def test_sqlite_with_immediate_transactions__is_clean(mode):
    assert sqlite_warnings({**SQLITE, "OPTIONS": {"transaction_mode": mode}}) == []


def test_postgresql__needs_no_transaction_mode():
    assert sqlite_warnings({"ENGINE": "django.db.backends.postgresql", "NAME": "x"}) == []


def test_api_docs_without_ninja_installed__warns_that_swagger_comes_from_a_cdn():
    (warning,) = api_docs_warnings(["django.contrib.admin", "prescient"])
    assert warning.id == "prescient.W010"
    assert "/prescient/docs" in warning.msg and "CDN" in warning.msg
    assert '"ninja"' in warning.hint
    assert api_docs_warnings(["ninja", "prescient"]) == []


@pytest.mark.urls("tests.admin.test_jobs_and_history")  # an admin, no prescient URLs: no docs page
def test_api_docs__no_warning_when_prescient_urls_are_not_mounted():
    assert api_docs_warnings(["prescient"]) == []


@pytest.mark.django_db  # manage.py check asks SQLite whether it has JSON (a connection)
def test_api_over_plain_http__warns_before_deploying(settings):
    settings.SECURE_SSL_REDIRECT = False
    settings.SECURE_PROXY_SSL_HEADER = None
    (warning,) = check_api_over_https()
    assert (warning.id, warning.level) == ("prescient.W013", WARNING)
    assert "/prescient/" in warning.msg and "bearer tokens" in warning.msg
    assert "SECURE_SSL_REDIRECT = True" in warning.hint
    said = io.StringIO()
    call_command("check", stdout=said, stderr=said)  # not by every command: only before deploying
    assert "W013" not in said.getvalue()
    deploy = io.StringIO()
    call_command("check", deploy=True, stdout=deploy, stderr=deploy)
    assert "prescient.W013" in deploy.getvalue()


@pytest.mark.parametrize(
    "secure",
    [{"SECURE_SSL_REDIRECT": True}, {"SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https")}],
)
def test_api_over_https__a_redirect_or_a_tls_proxy_is_clean(settings, secure):
    settings.SECURE_SSL_REDIRECT = False
    settings.SECURE_PROXY_SSL_HEADER = None
    for name, value in secure.items():
        setattr(settings, name, value)
    assert check_api_over_https() == []


@pytest.mark.urls("tests.admin.test_jobs_and_history")  # an admin, no prescient URLs: no API
def test_api_over_http__no_warning_when_the_api_is_not_mounted(settings):
    settings.SECURE_SSL_REDIRECT = False
    assert check_api_over_https() == []


def test_api_over_http__no_warning_without_urls(settings):
    settings.SECURE_SSL_REDIRECT = False
    del settings.ROOT_URLCONF  # e.g. settings made for workers only
    assert check_api_over_https() == []


def test_the_test_settings__trip_neither_warning():
    assert check_sqlite() == [] and check_api_docs() == []


@pytest.mark.parametrize(
    ("retention", "codes"),
    [
        ({"completed": 14, "*": 90}, []),
        ({"failed": None, "killed": 0}, []),
        (None, []),
        (30, ["prescient.E014"]),  # once E010, the id of a check naming a missing model
        ([("completed", 14)], ["prescient.E014"]),
        ({"complete": 14}, ["prescient.E011"]),
        ({"completed": -1}, ["prescient.E012"]),
        ({"*": 36_500}, []),
        ({"*": 36_501}, ["prescient.E012"]),  # beyond it, a cut-off before year 1
        ({"*": 1.5}, ["prescient.E012"]),
        ({"*": "90"}, ["prescient.E012"]),
        ({"*": True}, ["prescient.E012"]),
        ({"ran": "x"}, ["prescient.E011", "prescient.E012"]),
    ],
)
def test_history_retention_days(settings, retention, codes):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": retention}
    errors = check_settings()
    assert ids(errors) == codes
    if codes:
        assert "HISTORY_RETENTION_DAYS" in errors[0].msg


def test_history_retention_days__names_the_known_outcomes(settings):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"complete": 14}}
    (error,) = check_settings()
    assert "'complete'" in error.msg and "'completed'" in error.hint and "'*'" in error.hint


@pytest.mark.parametrize("setting", ["off", "OFF"])
def test_postgresql_with_autovacuum_off__warns_with_the_fix(setting):
    (warning,) = autovacuum_warnings(setting)
    assert warning.id == "prescient.W012"
    assert f"autovacuum = {setting}" in warning.msg and "prescient's live table" in warning.msg
    assert "ALTER SYSTEM SET autovacuum = on" in warning.hint and "VACUUM" in warning.hint


@pytest.mark.parametrize("setting", ["on", None])
def test_autovacuum_on_or_another_database__is_clean(setting):
    assert autovacuum_warnings(setting) == []


@pytest.mark.django_db
def test_autovacuum_check__reads_the_server_only_when_asked_for_the_database():
    assert check_autovacuum(databases=None) == []
    assert check_autovacuum(databases=["other"]) == []
    found = check_autovacuum(databases=["default"])
    if connection.vendor != "postgresql":
        assert server_autovacuum(connection) is None and found == []
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT setting FROM pg_settings WHERE name = 'autovacuum'")
        setting = cursor.fetchone()[0]
    assert server_autovacuum(connection) == setting
    assert [w.id for w in found] == ([] if setting == "on" else ["prescient.W012"])


# --- ranges that work (issue #28, item 3) -----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("WORKER_HEARTBEAT_SECONDS", 0, "prescient.E013"),  # a busy loop of transactions
        ("WORKER_HEARTBEAT_SECONDS", 0.1, "prescient.E013"),
        ("WORKER_HEARTBEAT_SECONDS", "5", "prescient.E013"),
        ("WORKER_POLL_SECONDS", 0, "prescient.E013"),
        ("WORKER_GRACE_SECONDS", -1, "prescient.E013"),
        ("CHILD_MEMORY_MB", 1, "prescient.E009"),  # the worker could not start its children
        ("CHILD_MEMORY_MB", 64, "prescient.E009"),
        ("CHILD_MAX_RUNS", 0, "prescient.E009"),
        ("TIMEOUT_SECONDS", -1, "prescient.E004"),
        ("TIMEOUT_SECONDS", float("nan"), "prescient.E004"),
        ("TIMEOUT_SECONDS", 10**9, "prescient.E004"),
        ("HORIZON_DAYS", 10**7, "prescient.E004"),  # beyond year 9999
        ("BATCH_SIZE", 10**6, "prescient.E006"),
        ("RECENT_ERRORS", 10**6, "prescient.E005"),
        ("SLOT_MINUTES", 2880, "prescient.E003"),
        ("ERROR_HANDLER", 42, "prescient.E008"),
    ],
)
def test_values_out_of_a_working_range(settings, key, value, code):
    settings.PRESCIENT = {key: value}
    errors = check_settings()
    assert ids(errors) == [code]
    assert key in errors[0].msg and repr(value) in errors[0].hint


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("WORKER_HEARTBEAT_SECONDS", 0.5),
        ("WORKER_POLL_SECONDS", 0.2),
        ("WORKER_GRACE_SECONDS", 0),
        ("CHILD_MEMORY_MB", 256),
        ("CHILD_MEMORY_MB", None),
        ("CHILD_MAX_RUNS", None),
        ("TIMEOUT_SECONDS", 0.5),
        ("SLOT_MINUTES", 1440),
    ],
)
def test_values_at_the_edge_of_their_range_are_clean(settings, key, value):
    settings.PRESCIENT = {key: value}
    assert check_settings() == []


def test_every_setting_has_a_rule():
    from prescient.conf import DEFAULTS, RULES

    assert sorted(RULES) == sorted(DEFAULTS)


# --- one id, one meaning: the table of prescient/diagnostics.py ------------------------------------

PACKAGE = Path(__file__).resolve().parent.parent / "prescient"
CHECK_ID = re.compile(r"prescient\.[EWI]\d{3}")


def id_literals(source: str) -> list[tuple[str, int]]:
    """Each string literal of ``source`` that is a whole check id (docstrings and comments, which
    may name ids, left out), with its line."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return sorted(
        (node.value, node.lineno) for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        and CHECK_ID.fullmatch(node.value)
    )


def test_id_literals__sees_ids_in_calls_and_rules_but_not_in_docstrings_or_hints():
    source = (
        '"""Raises prescient.E001."""\n'
        'Error("bad", id="prescient.E010")\n'
        'RULE = whole(0, 9, "prescient.E010")\n'
        'HINT = "or silence prescient.I001"\n'
    )
    assert id_literals(source) == [("prescient.E010", 2), ("prescient.E010", 3)]


def test_check_ids__each_is_written_once_in_the_whole_package():
    """Every system-check id is written exactly once, in the table of prescient/diagnostics.py;
    the checks name its entries. Two unrelated errors under one id (E010 was both a check
    naming a missing model and a HISTORY_RETENTION_DAYS that is not a dict) cannot come back."""
    places: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for value, line in id_literals(path.read_text()):
            places.setdefault(value, []).append(f"{path.relative_to(PACKAGE.parent).as_posix()}:{line}")
    written_twice = {value: where for value, where in places.items() if len(where) > 1}
    assert written_twice == {}
    outside = {value: where for value, [where] in places.items() if not where.startswith("prescient/diagnostics.py:")}
    assert outside == {}, "name an entry of prescient.diagnostics instead"
    assert set(places) == set(diagnostics.BY_ID)


def test_check_ids__the_table_has_one_entry_per_id_and_every_entry_is_used():
    assert len(diagnostics.BY_ID) == len(diagnostics.MESSAGES)
    names = {name for name, value in vars(diagnostics).items() if isinstance(value, diagnostics.Diagnostic)}
    code = "\n".join(
        path.read_text() for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts and path.name != "diagnostics.py"
    )
    unused = sorted(name for name in names if not re.search(rf"\bdiagnostics\.{name}\b", code))
    assert unused == []


def test_check_ids__a_check_naming_a_missing_model_and_a_bad_retention_differ(settings, register):
    register("test.ghost", lambda thing, job: None, model="nowhere.Ghost")
    [missing_model] = check_registry()
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": 30}
    [retention] = check_settings()
    assert missing_model.id == "prescient.E010"  # the one the docs have always listed
    assert retention.id == "prescient.E014"


@pytest.mark.parametrize("entry", diagnostics.MESSAGES, ids=lambda d: d.id)
def test_diagnostic__makes_a_message_of_its_level_and_id(entry):
    message = entry("what went wrong", hint="what to do")
    assert (message.id, message.level, message.msg, message.hint) == (
        entry.id, entry.level, "what went wrong", "what to do"
    )
    assert type(message) is {ERROR: Error, WARNING: Warning, INFO: Info}[entry.level]


# --- bad settings are reported, never raised (issue #32, item 2) -------------------------------


@pytest.mark.parametrize(("key", "value"), [("HORIZON_DAYS", 0), ("CALENDARS", 5), ("SLOT_MINUTES", 7)])
def test_registry__a_kind_that_needs_a_bad_setting_says_nothing_and_the_others_still_check(
    settings, register, key, value
):
    register("test.ghost", lambda thing, job: None, model="nowhere.Ghost")
    settings.PRESCIENT = {key: value}
    assert ids(check_registry()) == ["prescient.E010"]  # the checks kind needs no setting
    assert [e.id for e in check_settings()] != []  # the setting itself is reported


@pytest.mark.parametrize(
    ("conf", "codes"),
    [
        ({"STALE_AFTER_SECONDS": -5}, ["prescient.E007"]),  # not also W001 and W002 from -5
        ({"TIMEOUT_SECONDS": 0}, ["prescient.E004"]),
        ({"WORKER_HEARTBEAT_SECONDS": 10**6}, ["prescient.E013"]),
        ({"STALE_AFTER_SECONDS": 30, "TIMEOUT_SECONDS": 60, "SLOT_MINUTES": 7}, ["prescient.E003", "prescient.W001"]),
    ],
)
def test_settings__the_warnings_leave_out_a_bad_value(settings, conf, codes):
    settings.PRESCIENT = conf
    assert ids(check_settings()) == codes


def test_settings__an_error_handler_that_fails_to_import_is_e008_not_a_traceback(settings, tmp_path, monkeypatch):
    (tmp_path / "broken_handler.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.PRESCIENT = {"ERROR_HANDLER": "broken_handler.handle"}
    [error] = check_settings()
    assert error.id == "prescient.E008"
    assert error.msg == (
        "PRESCIENT['ERROR_HANDLER'] 'broken_handler.handle' cannot be used: RuntimeError: boom at import"
    )
