"""prescient's settings: one ``PRESCIENT`` dict in the host's settings, read at call time."""

from __future__ import annotations

import contextlib
import copy
import difflib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from . import diagnostics
from .states import Outcome

DEFAULTS: dict[str, Any] = {
    # Length of a time slot. Due times round up to a slot boundary (aligned to the UTC epoch).
    "SLOT_MINUTES": 15,
    # Longest a single check may run before it is stopped and counted as a failed run.
    "TIMEOUT_SECONDS": 60,
    # How many times one job may be re-scheduled by its check.
    "MAX_CHECKS": 5,
    # A next check further ahead than this ends the job (outcome ``horizon``).
    "HORIZON_DAYS": 30,
    # Failed runs tolerated before the job ends with outcome ``failed``.
    "MAX_RETRIES": 3,
    # Jobs claimed per batch by a tick.
    "BATCH_SIZE": 100,
    # A reservation older than this is presumed lost with its worker (None: timeout + 60 s).
    "STALE_AFTER_SECONDS": None,
    # Dotted path of the callable that decides what follows a failed run.
    "ERROR_HANDLER": "prescient.retries.retry_next_slot",
    # Errors kept on a job (oldest dropped first).
    "RECENT_ERRORS": 10,
    # prescient_worker: how often it heart-beats and renews the leases of its claims.
    "WORKER_HEARTBEAT_SECONDS": 5,
    # prescient_worker without LISTEN/NOTIFY (SQLite): how often it looks for due work.
    "WORKER_POLL_SECONDS": 1.0,
    # prescient_worker on SIGTERM/SIGINT: how long runs in flight may take to finish.
    "WORKER_GRACE_SECONDS": 30,
    # prescient_worker: the lanes of each child, the jobs it runs at once (threads for sync code,
    # its event loop for async code); 1: the child runs them one at a time itself.
    "WORKER_LANES": 8,
    # prescient_worker: jobs claimed beyond its idle children (0: a job is claimed only when a
    # child is free to start it at once).
    "WORKER_PREFETCH": 0,
    # prescient_worker: the address space of each child, in MB (None: no limit). A run that goes
    # over it is a failed run; the child goes on.
    "CHILD_MEMORY_MB": None,
    # prescient_worker: runs after which a child is replaced by a fresh one (None: never).
    "CHILD_MAX_RUNS": None,
    # prescient_worker: a job whose runs killed their process (os._exit, a segfault, the memory
    # cap) this many times in a row is buried, for a person to decide, not run again.
    "MAX_CRASHES": 3,
    # Days a JobHistory row is kept after its job finished, per outcome ("*": every outcome not
    # named; an outcome that is absent without "*", or given None, is kept forever). None: every
    # row is kept forever. Pruned by the upkeep service history_pruner and prescient_prune.
    "HISTORY_RETENTION_DAYS": {"completed": 14, "*": 90},
    # PostgreSQL: the history table's partitions, "month" or "day" (a busy history: a day's rows
    # dropped at once); made ahead and dropped whole by the upkeep (docs/operations.md).
    "HISTORY_PARTITION": "month",
    # Business hours for expectations' ladders, by name (prescient/calendars.py): each a dict of
    # "timezone", "hours" ({"mon-fri": "09:00-17:00"}), optional "closed" dates and "holidays".
    "CALENDARS": {},
    # PostgreSQL: triggers on each table an expectation watches name, at each UPDATE or DELETE,
    # the rows with a job to end, so a save that ends nothing asks nothing more (installed by
    # migrate; docs/expectations.md, "Cost"). False: every save asks after its commit.
    "SAVE_NOTICES": True,
    # The database alias (of DATABASES) the admin's lists and dashboard, the API's reads, the
    # metrics and prescient_status read, e.g. a streaming replica; None: the default database.
    # Writes and claims always go to the default one (prescient/reads.py).
    "READ_DATABASE": None,
    # The alias whose parameters the worker's LISTEN connection uses: a direct one beside a pooler
    # in transaction mode, where LISTEN hears nothing (docs/operations.md, "PgBouncer"); None: default.
    "LISTEN_DATABASE": None,
}


#: The ``PRESCIENT`` object last found valid, and a copy of it (a dict changed in place, or
#: replaced by override_settings, is validated again at its next read).
_valid: list[tuple[Any, Any]] = []


class BadSetting(ImproperlyConfigured):
    """The setting read is itself bad, and was read while the system checks run
    (:func:`reporting`): the check that read it has nothing to say; ``check_settings`` reports it."""


#: Whether the system checks are running (see :func:`reporting`).
_reporting: ContextVar[bool] = ContextVar("prescient_settings_reporting", default=False)


@contextlib.contextmanager
def reporting() -> Iterator[None]:
    """While the system checks run: a read of a good setting answers even when other settings
    are bad, and a read of a bad one raises :class:`BadSetting`, so that ``manage.py check``
    lists every bad key (each as its own ``prescient.E0xx``) instead of ending at the first in
    a traceback. A check that needs a bad setting catches BadSetting and says nothing more."""
    token = _reporting.set(True)
    try:
        yield
    finally:
        _reporting.reset(token)


def setting(name: str) -> Any:
    """Return one prescient setting, the host's value over the default.

    The first read of a ``PRESCIENT`` (and the first after it changes) validates all of it by
    the table ``RULES``: a bad value raises ImproperlyConfigured naming the key, the value and
    what is allowed, whatever reads it (a shell, a worker, a view), checks run or not. Within
    :func:`reporting` (the system checks) only a bad ``name`` itself raises (BadSetting).
    """
    if name not in DEFAULTS:
        raise KeyError(f"Unknown prescient setting {name!r}")
    conf = getattr(settings, "PRESCIENT", {})
    valid = _valid[0] if _valid else None
    if valid is None or valid[0] is not conf or valid[1] != conf:
        found = problems(conf)
        if found:
            if not _reporting.get():
                raise ImproperlyConfigured(str(found[0]))
            own = [problem for problem in found if problem.setting in (name, "")]
            if own:
                raise BadSetting(str(own[0]))
            return {**DEFAULTS, **conf}[name]
        _valid[:] = [(conf, copy.deepcopy(conf))]
    return {**DEFAULTS, **conf}[name]


def stale_after_seconds() -> float:
    """Seconds after which a reservation is presumed lost."""
    value = setting("STALE_AFTER_SECONDS")
    if value is None:
        return float(setting("TIMEOUT_SECONDS")) + 60.0
    return float(value)


# --- what each setting may be ---------------------------------------------------------------------
#
# One table, read by the system checks (``manage.py check``), by the commands that run checks
# (at start, ``--skip-checks`` or not) and by :func:`setting` when it first reads the settings.

MINUTES_PER_DAY = 24 * 60
#: The longest history retention accepted (a hundred years; None keeps forever): much beyond it,
#: the cut-off date would fall before year 1.
MAX_RETENTION_DAYS = 36_500
#: The smallest address space a child (a forked Django process that starts a thread) can start
#: in: below it the worker dies at start-up ("can't start new thread"), a restart loop.
MIN_CHILD_MEMORY_MB = 256
#: The most jobs claimed at once (``BATCH_SIZE``, a command's ``--batch-size``).
MAX_BATCH_SIZE = 10_000
#: The longest delay of a new job (the API's ``delay_seconds``, a command's ``--delay-seconds``):
#: the longest horizon, a hundred years; a check's own horizon usually refuses far less.
MAX_DELAY_SECONDS = MAX_RETENTION_DAYS * 24 * 3600
#: A week: the longest timeout or stale period accepted (longer ones overflow no clock, but are
#: almost surely a unit error: milliseconds given as seconds).
MAX_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class Problem:
    """A bad setting: its name, its value, what is allowed and the system check id it raises."""

    key: str
    value: Any
    allowed: str
    code: str
    hint: str = ""
    says: str = ""  # the message, when "<key> must be <allowed>" does not say it well
    #: The key of DEFAULTS it is about; "" when it is about no single setting (PRESCIENT is not
    #: a dict: every setting is bad), None for an unknown key (no setting is).
    setting: str | None = None

    @property
    def message(self) -> str:
        return self.says or f"{self.key} must be {self.allowed}"

    @property
    def got(self) -> str:
        return self.hint or f"got {self.value!r}"

    def __str__(self) -> str:
        return f"{self.message}; {self.got}"


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN


@dataclass(frozen=True)
class Rule:
    """What one value may be: ``allowed`` in words, ``test`` in code, ``code`` when it is not."""

    allowed: str
    test: Callable[[Any], bool]
    code: str

    def problems(self, key: str, value: Any) -> list[Problem]:
        return [] if self.test(value) else [Problem(key, value, self.allowed, self.code)]


def whole(least: int, most: int, code: str, *, none: str = "") -> Rule:
    """A whole number from ``least`` to ``most``; ``none``: what None means, if it is allowed."""
    allowed = f"a whole number from {least:,} to {most:,}" + (f", or None ({none})" if none else "")
    return Rule(allowed, lambda v: (bool(none) and v is None) or (_whole(v) and least <= v <= most), code)


def seconds(least: float, most: float, code: str, *, none: str = "", open_least: bool = False) -> Rule:
    """A number of seconds from ``least`` (excluded when ``open_least``) to ``most``."""
    low = f"more than {least:g}" if open_least else f"from {least:g}"
    allowed = f"a number {low} to {most:,g}" + (f", or None ({none})" if none else "")

    def test(value: Any) -> bool:
        if none and value is None:
            return True
        return _number(value) and (value > least if open_least else value >= least) and value <= most

    return Rule(allowed, test, code)


def _retention(key: str, retention: Any) -> list[Problem]:
    """None, or {outcome or "*": whole days from 0 to MAX_RETENTION_DAYS, or None}."""
    if retention is None:
        return []
    if not isinstance(retention, dict):
        return [Problem(
            key, retention, "None (keep history forever) or a dict of days per outcome",
            diagnostics.RETENTION_NOT_DICT.id,
            hint=f'expected e.g. {{"completed": 14, "*": 90}}; got {retention!r}',
        )]
    problems: list[Problem] = []
    known = [*Outcome.values, "*"]
    days_rule = whole(0, MAX_RETENTION_DAYS, diagnostics.RETENTION_DAYS.id, none="kept forever")
    for outcome, days in retention.items():
        if outcome not in known:
            problems.append(Problem(
                f"{key}[{outcome!r}]", outcome, "an outcome or '*'", diagnostics.RETENTION_OUTCOME.id,
                hint="known outcomes: " + ", ".join(repr(name) for name in known),
                says=f"{key} names an unknown outcome {outcome!r}",
            ))
        problems.extend(days_rule.problems(f"{key}[{outcome!r}]", days))
    return problems


def _alias(diagnostic: str) -> Callable[[str, Any], list[Problem]]:
    """A rule for a setting that is None or an alias of ``DATABASES``, reported as ``diagnostic``."""
    def rule(key: str, alias: Any) -> list[Problem]:
        if alias is None or (isinstance(alias, str) and alias in settings.DATABASES):
            return []
        return [Problem(key, alias, "None (the default database) or an alias of DATABASES", diagnostic,
                        hint=f"DATABASES has {', '.join(map(repr, settings.DATABASES))}; got {alias!r}")]

    return rule


#: The rules of ``PRESCIENT``, by key: a Rule, or a function ``(key, value) -> problems``.
RULES: dict[str, Rule | Callable[[str, Any], list[Problem]]] = {
    "SLOT_MINUTES": Rule(
        "a whole number of minutes that divides a day (e.g. 1, 5, 15, 30 or 60)",
        lambda v: _whole(v) and 0 < v <= MINUTES_PER_DAY and MINUTES_PER_DAY % v == 0,
        diagnostics.SLOT_MINUTES.id,
    ),
    "TIMEOUT_SECONDS": seconds(0, MAX_SECONDS, diagnostics.TIME_LIMITS.id, open_least=True),
    "HORIZON_DAYS": Rule(
        f"a number of days more than 0 and at most {MAX_RETENTION_DAYS:,}",
        lambda v: _number(v) and 0 < v <= MAX_RETENTION_DAYS,
        diagnostics.TIME_LIMITS.id,
    ),
    "MAX_CHECKS": whole(0, 1_000_000, diagnostics.COUNTS.id),
    "MAX_RETRIES": whole(0, 1_000_000, diagnostics.COUNTS.id),
    "RECENT_ERRORS": whole(0, 1_000, diagnostics.COUNTS.id),
    "BATCH_SIZE": whole(1, MAX_BATCH_SIZE, diagnostics.BATCH_SIZE.id),
    "STALE_AFTER_SECONDS": seconds(
        0, MAX_SECONDS + 3600, diagnostics.STALE_AFTER.id, open_least=True, none="TIMEOUT_SECONDS + 60"
    ),
    # Importable is checked by the system checks (E008 too); importing at the first read of a
    # setting could import the host's code half-way through its own import.
    "ERROR_HANDLER": Rule(
        "the dotted path of a callable(job, check, now)",
        lambda v: isinstance(v, str) and "." in v.strip(".") and " " not in v,
        diagnostics.ERROR_HANDLER.id,
    ),
    # Below half a second the heartbeat thread is a busy loop of transactions.
    "WORKER_HEARTBEAT_SECONDS": seconds(0.5, 3600, diagnostics.WORKER_PERIODS.id),
    "WORKER_POLL_SECONDS": seconds(0.05, 3600, diagnostics.WORKER_PERIODS.id),
    "WORKER_GRACE_SECONDS": seconds(0, 86_400, diagnostics.WORKER_PERIODS.id),
    "WORKER_PREFETCH": whole(0, 10_000, diagnostics.WORKER_LIMITS.id),
    "WORKER_LANES": whole(1, 1_024, diagnostics.WORKER_LIMITS.id),
    "CHILD_MEMORY_MB": whole(
        MIN_CHILD_MEMORY_MB, 16 * 1024 * 1024, diagnostics.WORKER_LIMITS.id, none="no limit"
    ),
    "CHILD_MAX_RUNS": whole(1, 1_000_000_000, diagnostics.WORKER_LIMITS.id, none="never replaced"),
    "MAX_CRASHES": whole(1, 1_000, diagnostics.WORKER_LIMITS.id),
    "HISTORY_RETENTION_DAYS": _retention,
    "HISTORY_PARTITION": Rule('"day" or "month"', lambda v: v in ("day", "month"), diagnostics.HISTORY_PARTITION.id),
    # Each calendar's contents are checked by prescient.calendars (diagnostics.CALENDAR_MALFORMED).
    "CALENDARS": Rule(
        "a dict of calendar names to dicts (timezone, hours, closed, holidays)",
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(c, dict) for k, c in v.items()),
        diagnostics.CALENDARS_NOT_DICT.id,
    ),
    "SAVE_NOTICES": Rule("True or False", lambda v: isinstance(v, bool), diagnostics.SAVE_NOTICES.id),
    "READ_DATABASE": _alias(diagnostics.READ_DATABASE.id),  # prescient.reads
    "LISTEN_DATABASE": _alias(diagnostics.LISTEN_DATABASE.id),  # prescient.runtime.listener
}


def problems(conf: Any) -> list[Problem]:
    """Everything wrong with ``conf`` (the host's ``PRESCIENT``), by the table ``RULES``."""
    if not isinstance(conf, dict):
        return [Problem(
            "settings.PRESCIENT", conf, "a dict", diagnostics.SETTINGS_NOT_DICT.id,
            hint=f"got {type(conf).__name__}", setting="",
        )]
    found: list[Problem] = []
    for key in conf:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(str(key), DEFAULTS, n=3)
            found.append(Problem(
                f"PRESCIENT[{key!r}]", conf[key], "a known setting", diagnostics.UNKNOWN_SETTING.id,
                says=f"Unknown setting PRESCIENT[{key!r}]",
                hint=(f"did you mean {' or '.join(close)}? " if close else "")
                + "Known settings: " + ", ".join(sorted(DEFAULTS)),
            ))
    values = {**DEFAULTS, **conf}
    for key, rule in RULES.items():
        name = f"PRESCIENT[{key!r}]"
        each = rule.problems(name, values[key]) if isinstance(rule, Rule) else rule(name, values[key])
        found.extend(replace(problem, setting=key) for problem in each)
    return found


#: prescient's django.tasks backend, as ``TASKS`` names it.
BACKEND_PATH = "prescient.tasks.PrescientBackend"


def import_problems(conf: Any) -> list[Problem]:
    """What :func:`problems` cannot see without importing: an ``ERROR_HANDLER`` that cannot
    be imported or is not callable. Only where importing the host's code is safe (the system
    checks, a command's start), never at a setting's first read, which may come half-way
    through the host's own imports. Empty for a ``conf`` that is no dict or an ERROR_HANDLER that
    is no string (:func:`problems` reports those)."""
    path = {**DEFAULTS, **conf}["ERROR_HANDLER"] if isinstance(conf, dict) else None
    if not isinstance(path, str):
        return []
    try:
        handler = import_string(path)
    except Exception as exc:  # the host's module may raise anything while it is imported
        reason = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
    else:
        if callable(handler):
            return []
        reason = f"{type(handler).__name__} is not callable"
    return [Problem(
        "PRESCIENT['ERROR_HANDLER']", path, "the dotted path of a callable(job, check, now)",
        diagnostics.ERROR_HANDLER.id, setting="ERROR_HANDLER",
        says=f"PRESCIENT['ERROR_HANDLER'] {path!r} cannot be used: {' '.join(reason.split())}",
        hint="give the dotted path of a callable(job, check, now)",
    )]


def _task_limits(key: str, value: Any) -> list[Problem]:
    """``{"<task path>" or "queue:<name>": {"running": N, "runs": N, "per_seconds": S}}``."""
    allowed = 'a dict of task paths or "queue:<name>" to {"running": N} and/or {"runs": N, "per_seconds": S}'
    if not isinstance(value, dict):
        return [Problem(key, value, allowed, diagnostics.TASK_OPTION_VALUE.id)]
    found: list[Problem] = []
    for name, spec in value.items():
        where = f"{key}[{name!r}]"
        if not isinstance(name, str) or not name or not isinstance(spec, dict) or not spec:
            found.append(Problem(where, spec, allowed, diagnostics.TASK_OPTION_VALUE.id))
            continue
        unknown = set(spec) - {"running", "runs", "per_seconds"}
        rate_given = {"runs", "per_seconds"} & set(spec)
        if unknown or (rate_given and rate_given != {"runs", "per_seconds"}):
            found.append(Problem(where, spec, allowed, diagnostics.TASK_OPTION_VALUE.id))
            continue
        for field_, rule in (("running", whole(1, 1_000_000, diagnostics.TASK_OPTION_VALUE.id)),
                             ("runs", whole(1, 1_000_000, diagnostics.TASK_OPTION_VALUE.id)),
                             ("per_seconds", seconds(0, MAX_SECONDS, diagnostics.TASK_OPTION_VALUE.id,
                                                     open_least=True))):
            if field_ in spec:
                found.extend(rule.problems(f"{where}[{field_!r}]", spec[field_]))
    return found


class _Limits(Rule):
    """The ``LIMITS`` option: a rule whose problems are its own function's."""

    def problems(self, key: str, value: Any) -> list[Problem]:
        return _task_limits(key, value)


#: The OPTIONS of a prescient django.tasks backend (``TASKS[alias]["OPTIONS"]``), by key.
OPTIONS_RULES: dict[str, Rule] = {
    "MAX_RETRIES": whole(0, 1_000_000, diagnostics.TASK_OPTION_VALUE.id),
    "TIMEOUT_SECONDS": seconds(0, MAX_SECONDS, diagnostics.TASK_OPTION_VALUE.id, open_least=True),
    "RETRY_DELAY_SECONDS": seconds(0, MAX_SECONDS, diagnostics.TASK_OPTION_VALUE.id),
    "ROUND_TO_SLOT": Rule("True or False", lambda v: isinstance(v, bool), diagnostics.TASK_OPTION_VALUE.id),
    # Limits and rates per task path or queue (prescient.limits), held by the database.
    "LIMITS": _Limits("limits and rates per task path or queue", lambda v: True, diagnostics.TASK_OPTION_VALUE.id),
}


def option_problems(alias: str, options: Any) -> list[Problem]:
    """Everything wrong with the OPTIONS of the prescient task backend ``alias``."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, dict):
        return [Problem(
            where, options, "a dict", diagnostics.TASK_OPTIONS_NOT_DICT.id, hint=f"got {type(options).__name__}"
        )]
    found: list[Problem] = []
    for key, value in options.items():
        rule = OPTIONS_RULES.get(key)
        if rule is None:
            found.append(Problem(
                f"{where}[{key!r}]", value, "a known option", diagnostics.UNKNOWN_TASK_OPTION.id,
                hint="Known options: " + ", ".join(sorted(OPTIONS_RULES)), says=f"Unknown option {where}[{key!r}]",
            ))
        else:
            found.extend(rule.problems(f"{where}[{key!r}]", value))
    return found


def validate_options(alias: str, options: Any) -> None:
    """Raise ImproperlyConfigured naming the first bad OPTION of the task backend ``alias``."""
    found = option_problems(alias, options)
    if found:
        raise ImproperlyConfigured(str(found[0]))


def validate(*, imports: bool = False) -> None:
    """Raise ImproperlyConfigured naming the first bad key of ``PRESCIENT``, its value and what
    is allowed (every prescient command calls it at start, before anything is claimed, with
    ``imports``: then an ``ERROR_HANDLER`` that cannot be imported is refused too)."""
    conf = getattr(settings, "PRESCIENT", {})
    found = problems(conf)
    if not found and imports:
        found = import_problems(conf)
    if found:
        raise ImproperlyConfigured(str(found[0]))
