"""prescient's system-check messages: one table of every id, its level, what it says and what
to do. The checks build their messages from it (``diagnostics.UNKNOWN_SETTING(msg, hint=…)``)
and docs/system-checks.md is rendered from it (``scripts/system-checks-table``), so an id
is written once, here: ``tests/test_system_checks.py`` fails if an id literal appears anywhere
else in prescient/ or twice in this table.

Ids: E001–E018 the ``PRESCIENT`` settings, E010 registered checks, E020–E023 a task backend (its
``OPTIONS``, its app), E030–E032 calendars and expectations; W… warnings, I… deployment information.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.checks import ERROR, INFO, WARNING, CheckMessage, Error, Info, Warning

_CLASSES: dict[int, type[Error] | type[Warning] | type[Info]] = {ERROR: Error, WARNING: Warning, INFO: Info}
_LEVEL_NAMES = {ERROR: "error", WARNING: "warning", INFO: "info"}


@dataclass(frozen=True)
class Diagnostic:
    """One system-check id: its ``level``, what it says (``title``) and what to do (``hint``),
    in the words of the docs. A message of it names the case at hand: the value, the setting."""

    id: str
    level: int
    title: str
    hint: str

    def __call__(self, msg: str, *, hint: str | None = None, obj: Any = None) -> CheckMessage:
        """The message Django's checks framework reports (an Error, a Warning or an Info)."""
        return _CLASSES[self.level](msg, hint=hint, obj=obj, id=self.id)

    @property
    def level_name(self) -> str:
        return _LEVEL_NAMES[self.level]


SEE_HINT = "the hint names what was expected and what was found ([settings.md](settings.md))"

# --- settings (prescient/conf.py: RULES) --------------------------------------------------------

SETTINGS_NOT_DICT = Diagnostic("prescient.E001", ERROR, "`settings.PRESCIENT` is not a dict", SEE_HINT)
UNKNOWN_SETTING = Diagnostic(
    "prescient.E002", ERROR, "`PRESCIENT` has a key prescient does not know (a typo?)",
    "the hint names the closest known settings and lists them all",
)
SLOT_MINUTES = Diagnostic(
    "prescient.E003", ERROR, "`SLOT_MINUTES` is not a whole number of minutes that divides a day", SEE_HINT
)
TIME_LIMITS = Diagnostic(
    "prescient.E004", ERROR, "`TIMEOUT_SECONDS` or `HORIZON_DAYS` is not a number in range", SEE_HINT
)
COUNTS = Diagnostic(
    "prescient.E005", ERROR, "`MAX_CHECKS`, `MAX_RETRIES` or `RECENT_ERRORS` is not a whole number in range",
    SEE_HINT,
)
SAVE_NOTICES = Diagnostic("prescient.E015", ERROR, "`SAVE_NOTICES` is not True or False", SEE_HINT)
READ_DATABASE = Diagnostic(
    "prescient.E016", ERROR, "`READ_DATABASE` is neither `None` nor an alias of `DATABASES`",
    "the hint lists the aliases of `DATABASES` ([operations.md](operations.md#reads-off-the-primary))",
)
LISTEN_DATABASE = Diagnostic(
    "prescient.E018", ERROR, "`LISTEN_DATABASE` is neither `None` nor an alias of `DATABASES`",
    "the hint lists the aliases of `DATABASES` ([operations.md](operations.md#pgbouncer))",
)
BATCH_SIZE = Diagnostic("prescient.E006", ERROR, "`BATCH_SIZE` is not a whole number from 1 to 10,000", SEE_HINT)
STALE_AFTER = Diagnostic(
    "prescient.E007", ERROR, "`STALE_AFTER_SECONDS` is neither `None` nor a number of seconds in range", SEE_HINT
)
ERROR_HANDLER = Diagnostic(
    "prescient.E008", ERROR, "`ERROR_HANDLER` is not the dotted path of a callable, or cannot be imported",
    "give the dotted path of a callable(job, check, now)",
)
WORKER_LIMITS = Diagnostic(
    "prescient.E009", ERROR,
    "`WORKER_LANES`, `WORKER_PREFETCH`, `CHILD_MEMORY_MB`, `CHILD_MAX_RUNS` or `MAX_CRASHES` is out of range",
    SEE_HINT + "; `CHILD_MEMORY_MB` is at least 256: a child needs about 210 MB to start a thread",
)
RETENTION_OUTCOME = Diagnostic(
    "prescient.E011", ERROR, "`HISTORY_RETENTION_DAYS` names an unknown outcome",
    "the hint lists the outcomes, and `\"*\"` for every outcome not named ([retention.md](retention.md))",
)
RETENTION_DAYS = Diagnostic(
    "prescient.E012", ERROR, "a day count of `HISTORY_RETENTION_DAYS` is not `None` or a whole number "
    "from 0 to 36,500", "give whole days, or `None` to keep that outcome forever",
)
WORKER_PERIODS = Diagnostic(
    "prescient.E013", ERROR, "`WORKER_HEARTBEAT_SECONDS`, `WORKER_POLL_SECONDS` or `WORKER_GRACE_SECONDS` "
    "is out of range", SEE_HINT + "; below half a second the heartbeat is a busy loop of transactions",
)
RETENTION_NOT_DICT = Diagnostic(
    "prescient.E014", ERROR, "`HISTORY_RETENTION_DAYS` is neither `None` nor a dict of days per outcome",
    'e.g. `{"completed": 14, "*": 90}` ([retention.md](retention.md))',
)
HISTORY_PARTITION = Diagnostic(
    "prescient.E017", ERROR, '`HISTORY_PARTITION` is neither `"day"` nor `"month"`',
    "the history's partitions on PostgreSQL ([operations.md](operations.md#history-partitions))",
)

# --- registrations ----------------------------------------------------------------------------

CHECK_MODEL_MISSING = Diagnostic(
    "prescient.E010", ERROR, "a registered check names a model that is not installed",
    "fix `model=` of the `@prescient.check`, or add its app to `INSTALLED_APPS`",
)
TASK_OPTIONS_NOT_DICT = Diagnostic(
    "prescient.E020", ERROR, "the `OPTIONS` of a prescient `TASKS` backend are not a dict",
    "see [tasks.md](tasks.md)",
)
UNKNOWN_TASK_OPTION = Diagnostic(
    "prescient.E021", ERROR, "the `OPTIONS` of a prescient `TASKS` backend have an unknown key",
    "the hint lists the known options",
)
TASK_OPTION_VALUE = Diagnostic(
    "prescient.E022", ERROR, "an option of a prescient `TASKS` backend is out of range", SEE_HINT,
)
TASKS_APP_MISSING = Diagnostic(
    "prescient.E023", ERROR, "a `TASKS` backend is prescient's, but `prescient` is not in `INSTALLED_APPS`",
    'add `"prescient"` to `INSTALLED_APPS` and run `migrate`: its tasks are jobs in its tables',
)
CALENDARS_NOT_DICT = Diagnostic(
    "prescient.E030", ERROR, "`CALENDARS` is not a dict of names to dicts", SEE_HINT,
)
CALENDAR_MALFORMED = Diagnostic(
    "prescient.E031", ERROR, "a calendar of `CALENDARS` is malformed (time zone, hours, closed dates), or "
    "names `holidays` without the `holidays` package or for a country it does not know",
    'the message names the calendar and what is wrong; `pip install "prescient[holidays]"`',
)
EXPECTATION_MALFORMED = Diagnostic(
    "prescient.E032", ERROR, "an expectation names a model that is not installed or a calendar not in "
    "`CALENDARS`, its `met` Q names a field or lookup its model does not have, or its ladder is empty, not "
    "rising, or beyond the horizon (counted in its calendar's open time: at worst, over the coming year)",
    "fix the declaration, or raise `HORIZON_DAYS` (or its `horizon_days`)",
)

# --- warnings -------------------------------------------------------------------------------------

STALE_NOT_AFTER_TIMEOUT = Diagnostic(
    "prescient.W001", WARNING, "`STALE_AFTER_SECONDS` is not longer than `TIMEOUT_SECONDS`: a slow but "
    "alive run could be taken for lost", "lengthen the stale period: leave a grace period",
)
HEARTBEAT_TOO_SLOW = Diagnostic(
    "prescient.W002", WARNING, "`WORKER_HEARTBEAT_SECONDS` is more than half the stale period: one late "
    "heartbeat makes a worker's claims look lost", "lengthen the stale period or shorten the heartbeat",
)
CRASHES_NOT_KEPT = Diagnostic(
    "prescient.W003", WARNING, "`RECENT_ERRORS` is less than `MAX_CRASHES`: a job whose runs end their process "
    "is never buried (the row of crashes is counted from its recent errors)",
    "keep at least `MAX_CRASHES` recent errors",
)
API_DOCS_CDN = Diagnostic(
    "prescient.W010", WARNING, "the API docs page (`/prescient/docs`) loads Swagger UI from a CDN, so it is "
    "blank without internet (raised only when prescient's URLs are mounted)",
    'add `"ninja"` to `INSTALLED_APPS`: django-ninja then serves Swagger UI as static files (run '
    "`collectstatic` when `DEBUG` is off)",
)
SQLITE_NOT_IMMEDIATE = Diagnostic(
    "prescient.W011", WARNING, 'the default database is SQLite without `transaction_mode: "IMMEDIATE"` '
    '(or `EXCLUSIVE`): a worker or tick beside the web server fails with "database is locked" under load',
    '`"OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20}` in `DATABASES["default"]` '
    "(Django ≥ 5.1), or PostgreSQL in production",
)
AUTOVACUUM_OFF = Diagnostic(
    "prescient.W012", WARNING, "PostgreSQL runs with `autovacuum = off`: dead rows pile up in the live "
    "table (every job inserts, updates and deletes a row) and its due query slows down (bench `churn`: "
    "ten times slower after a million jobs). A check of the database: Django runs it at `migrate` and with "
    "`manage.py check --database default`",
    "`ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf();` (as PostgreSQL ships), or "
    "`VACUUM (ANALYZE) prescient_futurejob` every few minutes from cron",
)
SAVE_TRIGGER_MISSING = Diagnostic(
    "prescient.W014", WARNING, "a table an expectation watches has no save trigger (or an older one) on "
    "PostgreSQL: each save of its model asks the database once more after its commit to find a pending "
    "expectation. A check of the database: Django runs it at `migrate` and with `manage.py check --database "
    "default`",
    "run `manage.py migrate` (it installs the triggers of the models watched then); or set "
    '`PRESCIENT["SAVE_NOTICES"] = False` to judge every save by asking ([expectations.md](expectations.md))',
)
API_TOKENS_OVER_HTTP = Diagnostic(
    "prescient.W013", WARNING, "the JSON API is mounted but nothing in the settings says requests arrive "
    "over HTTPS: `SECURE_SSL_REDIRECT` is off and `SECURE_PROXY_SSL_HEADER` is unset, so the API's bearer "
    "tokens may travel in clear. A deployment check: `manage.py check --deploy` says it",
    "serve the API over HTTPS only: `SECURE_SSL_REDIRECT = True`, or, behind a proxy that terminates TLS "
    "(and refuses or redirects plain HTTP), `SECURE_PROXY_SSL_HEADER`; give clients `https://` URLs, since "
    "a redirect comes after the token was sent ([api.md](api.md))",
)

# --- information ----------------------------------------------------------------------------------

METRICS_WITHOUT_CLIENT = Diagnostic(
    "prescient.I001", INFO, "the metrics URL is mounted but `prometheus_client` is not installed: it "
    "answers 501. A deployment check: `manage.py check --deploy` says it",
    "`pip install 'prescient[metrics]'` to serve Prometheus metrics, or silence prescient.I001",
)

#: Every message, in the order of the docs.
MESSAGES: tuple[Diagnostic, ...] = tuple(
    sorted(
        (value for value in list(globals().values()) if isinstance(value, Diagnostic)),
        key=lambda d: ("EWI".index(d.id[len("prescient.")]), d.id),
    )
)
BY_ID: dict[str, Diagnostic] = {d.id: d for d in MESSAGES}


def render_markdown() -> str:
    """The table of docs/system-checks.md."""
    lines = ["| Id | Level | What it says | What to do |", "|----|-------|--------------|------------|"]
    lines += [f"| `{d.id}` | {d.level_name} | {d.title} | {d.hint} |" for d in MESSAGES]
    return "\n".join(lines)

