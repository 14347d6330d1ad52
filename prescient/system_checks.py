"""System checks: bad settings, broken registrations and bad options of each kind of job are
reported by ``manage.py check``."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import Tags, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.urls import NoReverseMatch, reverse

from . import diagnostics
from .conf import DEFAULTS, BadSetting, Problem, import_problems, problems, reporting
from .engine.kind import registered_kinds


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Each value of ``PRESCIENT`` against the table of rules in conf.py (the one the first
    read of a setting applies), every bad key at once; then what no single value shows: an
    importable error handler, and a grace period between the heartbeat, the timeout and the
    stale period. What needs a bad value is left out: the value is reported already."""
    conf = getattr(settings, "PRESCIENT", {})
    found = problems(conf)
    errors: list[Any] = [_message(problem) for problem in found]
    if not isinstance(conf, dict):
        return errors
    bad = {problem.setting for problem in found}
    values = {**DEFAULTS, **conf}
    stale = values["STALE_AFTER_SECONDS"]
    timeout = values["TIMEOUT_SECONDS"]
    if not bad & {"STALE_AFTER_SECONDS", "TIMEOUT_SECONDS"} and stale is not None and stale <= timeout:
        errors.append(
            diagnostics.STALE_NOT_AFTER_TIMEOUT(
                "PRESCIENT['STALE_AFTER_SECONDS'] is not longer than TIMEOUT_SECONDS",
                hint="a slow but alive run could be buried; leave a grace period",
            )
        )
    heartbeat = values["WORKER_HEARTBEAT_SECONDS"]
    stale_period = timeout + 60 if stale is None else stale
    periods = {"WORKER_HEARTBEAT_SECONDS", "STALE_AFTER_SECONDS", "TIMEOUT_SECONDS"}
    if not bad & periods and heartbeat * 2 >= stale_period:
        errors.append(
            diagnostics.HEARTBEAT_TOO_SLOW(
                "PRESCIENT['WORKER_HEARTBEAT_SECONDS'] is more than half the stale period",
                hint=(
                    f"a healthy worker renews its leases every {heartbeat}s; with a stale period of "
                    f"{stale_period}s one late heartbeat makes its claims look lost"
                ),
            )
        )
    if not bad & {"RECENT_ERRORS", "MAX_CRASHES"} and values["RECENT_ERRORS"] < values["MAX_CRASHES"]:
        errors.append(
            diagnostics.CRASHES_NOT_KEPT(
                "PRESCIENT['RECENT_ERRORS'] is less than MAX_CRASHES",
                hint=(
                    f"{values['RECENT_ERRORS']} recent errors are kept; {values['MAX_CRASHES']} crashes in a row "
                    "bury a job, so none ever is"
                ),
            )
        )
    if "ERROR_HANDLER" not in bad:
        errors.extend(_message(problem) for problem in import_problems(conf))
    return errors


def _message(problem: Problem) -> Any:
    """The system-check message of a bad setting: its id's class, what is wrong, what was got."""
    return diagnostics.BY_ID[problem.code](problem.message, hint=problem.got)


@register(Tags.models)
def check_registry(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Each kind of job validates its own registrations and options (see JobKind.system_checks).

    A kind whose checks need a bad setting (expectations read ``CALENDARS`` and
    ``HORIZON_DAYS``) says nothing: check_settings reports that setting, and the kind's own
    checks run once it is fixed; the other kinds' checks run all the same."""
    errors: list[Any] = []
    for kind in registered_kinds():
        try:
            with reporting():
                found = kind.system_checks()
        except BadSetting:
            continue
        errors.extend(found)
    return errors


@register(Tags.compatibility)
def check_sqlite(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    return sqlite_warnings(settings.DATABASES.get("default", {}))


def sqlite_warnings(database: Mapping[str, Any]) -> list[Any]:
    """SQLite's default transactions start shared and fail with "database is locked" when two
    processes (a worker and the web server) upgrade to a write at once; IMMEDIATE ones queue."""
    if "sqlite3" not in str(database.get("ENGINE", "")):
        return []
    options = database.get("OPTIONS") or {}
    mode = options.get("transaction_mode") if isinstance(options, dict) else None
    if str(mode or "").upper() in ("IMMEDIATE", "EXCLUSIVE"):  # both take the write lock at BEGIN
        return []
    return [
        diagnostics.SQLITE_NOT_IMMEDIATE(
            "The default database is SQLite without transaction_mode IMMEDIATE: a worker or tick "
            "beside the web server will fail with \"database is locked\" under load",
            hint=(
                'add "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20} to DATABASES["default"] '
                f"(got transaction_mode={mode!r}); or use PostgreSQL in production"
            ),
        )
    ]


@register(Tags.database)
def check_autovacuum(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """``diagnostics.AUTOVACUUM_OFF`` (W012), at ``migrate`` and ``check --database default`` (checks of the
    database run only when asked for a database)."""
    if not databases or "default" not in databases:
        return []
    return autovacuum_warnings(server_autovacuum(connections["default"]))


@register(Tags.database)
def check_save_triggers(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """``diagnostics.SAVE_TRIGGER_MISSING`` (W014): a watched table without its current save
    trigger, on PostgreSQL, when asked for the default database."""
    if not databases or "default" not in databases:
        return []
    from .kinds import commit_notices

    try:
        tables = commit_notices.missing("default")
    except DatabaseError:  # unreachable, or not migrated yet: migrate and Django's checks say so
        return []
    return [
        diagnostics.SAVE_TRIGGER_MISSING(
            f"table {table} has no current prescient save trigger: each save of its model asks PostgreSQL "
            "once more after its commit for a pending expectation",
            obj=table,
        )
        for table in tables
    ]


def server_autovacuum(connection: BaseDatabaseWrapper) -> str | None:
    """PostgreSQL's ``autovacuum`` setting, or None (another database, or none reachable)."""
    if connection.vendor != "postgresql":
        return None
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW autovacuum")
            row = cursor.fetchone()
    except DatabaseError:  # unreachable: migrate and Django's own checks say so
        return None
    return str(row[0]) if row else None


def autovacuum_warnings(setting: str | None) -> list[Any]:
    """The live table is a queue: each job is an INSERT, an UPDATE and a DELETE, and each leaves
    a dead row version that only (auto)vacuum clears. Migration 0010 fits autovacuum to that;
    with autovacuum off server-wide nothing clears them, and the due query slows as they pile up
    (bench ``churn``: 10x after a million jobs)."""
    if setting is None or setting == "on":
        return []
    return [
        diagnostics.AUTOVACUUM_OFF(
            f"PostgreSQL runs with autovacuum = {setting}: dead rows pile up in prescient's live "
            "table (every job inserts, updates and deletes a row) and its due query slows down",
            hint=(
                "turn it on (ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf();), or "
                "VACUUM (ANALYZE) prescient_futurejob every few minutes from cron"
            ),
        )
    ]


@register(Tags.urls)
def check_api_docs(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    return api_docs_warnings(settings.INSTALLED_APPS)


def api_docs_warnings(installed_apps: list[str]) -> list[Any]:
    """The API's docs page (``docs``) loads Swagger UI from a CDN unless django-ninja is an
    installed app (then its own copy is served as static files): blank without internet."""
    if "ninja" in installed_apps or not getattr(settings, "ROOT_URLCONF", None):
        return []
    try:
        docs = reverse("prescient-api:openapi-view")
    except (NoReverseMatch, ImproperlyConfigured, ImportError):  # prescient's URLs are not mounted
        return []
    return [
        diagnostics.API_DOCS_CDN(
            f"prescient's API docs page ({docs}) loads Swagger UI from a CDN: it is blank without internet",
            hint='add "ninja" to INSTALLED_APPS: django-ninja then serves Swagger UI as static files',
        )
    ]


@register(Tags.urls, deploy=True)
def check_metrics(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """``diagnostics.METRICS_WITHOUT_CLIENT`` (I001): the metrics URL is mounted but ``prometheus_client`` is missing.

    A deployment check (``manage.py check --deploy``): where the metrics are wired in, said
    once before going live, not by every command (``runserver``, ``migrate``, each worker)."""
    if not getattr(settings, "ROOT_URLCONF", None):  # a worker-only project serves no URL
        return []
    try:
        url = reverse("prescient-metrics")
    except (NoReverseMatch, ImproperlyConfigured, ImportError):  # not mounted; a broken URLconf is Django's to report
        return []
    if importlib.util.find_spec("prometheus_client") is not None:
        return []
    return [
        diagnostics.METRICS_WITHOUT_CLIENT(
            f"GET {url} answers 501: prometheus_client is not installed",
            hint="pip install 'prescient[metrics]' to serve Prometheus metrics, or silence prescient.I001",
        )
    ]


@register(Tags.security, deploy=True)
def check_api_over_https(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """``diagnostics.API_TOKENS_OVER_HTTP`` (W013): the API is mounted, and neither Django's
    redirect to HTTPS nor a TLS-terminating proxy is configured. A bearer token is a password
    sent with every request; in clear, anyone on the path can replay it until it is revoked."""
    if not getattr(settings, "ROOT_URLCONF", None):  # a worker-only project serves no URL
        return []
    if getattr(settings, "SECURE_SSL_REDIRECT", False) or getattr(settings, "SECURE_PROXY_SSL_HEADER", None):
        return []
    try:
        root = reverse("prescient-api:openapi-json").removesuffix("openapi.json")
    except (NoReverseMatch, ImproperlyConfigured, ImportError):  # the API is not mounted
        return []
    return [
        diagnostics.API_TOKENS_OVER_HTTP(
            f"prescient's JSON API ({root}) takes bearer tokens, and SECURE_SSL_REDIRECT is off with no "
            "SECURE_PROXY_SSL_HEADER: nothing says the tokens travel over HTTPS",
            hint=(
                "set SECURE_SSL_REDIRECT = True, or SECURE_PROXY_SSL_HEADER behind a proxy that terminates TLS; "
                "give clients https:// URLs (a redirect comes after the token was sent), or silence prescient.W013"
            ),
        )
    ]
