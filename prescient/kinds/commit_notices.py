"""On PostgreSQL, a save of a watched model that ends nothing costs no round trip.

A trigger on each watched model's table, deferred to the commit (a constraint trigger,
``DEFERRABLE INITIALLY DEFERRED``, on UPDATE and DELETE: a new row has no expectation yet),
runs for each row written the judgement :mod:`.judging` compiles (the row's pending
expectations, its ``met`` Q asked beside each, the row's existence) on what the transaction is
committing, and raises a NOTICE naming the row only when there is something to end: a job met,
its row gone, or a ``met`` that only Python can ask (a callable). The notice comes back with the
commit's own answer, before the driver returns; the process then judges the rows named, on the
committed state, as before. A save that ends nothing (none pending, or one not met) asks
nothing more of the database.

The trigger reads the jobs as they are when the saving transaction commits: an expectation
another process started a moment ago is judged like any other. Installed by ``migrate``
(``post_migrate``) for the models watched then, taken from a table whose model is no longer
watched, and trusted only once found with the body the current declarations compile to: a
table without it (a model watched, or a ``met`` changed, since the last ``migrate``;
``SAVE_NOTICES`` off; SQLite; psycopg2) is judged by asking after each commit (prescient.W014
says so). A judgement that fails in the trigger names the row (judged in Python, which logs
why) and never fails the host's commit.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
import weakref
from typing import Any

from django.apps import apps
from django.db import DatabaseError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from prescient.conf import setting
from prescient.expectations import KIND, generation, registered
from prescient.models import FutureJob

from . import judging

logger = logging.getLogger(__name__)

TRIGGER = "prescient_watch"
#: In the function's name: a new version of its body replaces the old at the next migrate.
VERSION = 1
PREFIX = "prescient-judge "
#: Keys kept per connection before it stops telling them apart (a bulk update of many rows with
#: jobs pending): past it, every key noted is judged the slow way until the next commit read.
MOST_HEARD = 10_000
#: How long a table's trigger, once found (or not), is trusted before it is looked for again.
TRUST_SECONDS = 300.0


class Heard:
    """The keys the triggers named on one driver connection, until a commit's judgement reads
    them."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.overflowed = False

    def __call__(self, diagnostic: Any) -> None:  # psycopg's notice handler
        message = diagnostic.message_primary or ""
        if not message.startswith(PREFIX):
            return
        if len(self.keys) < MOST_HEARD:
            self.keys.add(message[len(PREFIX):])
        else:
            self.overflowed = True

    def take(self, table: str, pk: Any) -> bool:
        """Whether the row ``pk`` of ``table`` was named (or cannot be told), forgetting it."""
        key = f"{table}:{pk}"
        if key in self.keys:
            self.keys.discard(key)
            return True
        return self.overflowed

    def settle(self) -> None:
        """Forget what was heard: the transaction it came from is judged."""
        self.keys.clear()
        self.overflowed = False


#: Each psycopg connection's :class:`Heard`, registered once (a pooled connection outlives the
#: Django connection that opened it).
_heard: weakref.WeakKeyDictionary[Any, Heard] = weakref.WeakKeyDictionary()
#: Whether a model's table on an alias has its current trigger (by the registry's generation),
#: and until when that is trusted.
_found: dict[tuple[str, type[models.Model], int], tuple[bool, float]] = {}


def usable(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection`` can hear the triggers: PostgreSQL through psycopg 3."""
    if connection.vendor != "postgresql":
        return False
    return _psycopg3()


@functools.cache
def _psycopg3() -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def enabled() -> bool:
    """``PRESCIENT["SAVE_NOTICES"]`` (False while the setting is bad: the checks say so)."""
    try:
        return bool(setting("SAVE_NOTICES"))
    except Exception:  # a bad PRESCIENT: the system checks say so; saves are judged the slow way
        return False


def listen(connection: BaseDatabaseWrapper) -> Heard | None:
    """The :class:`Heard` of ``connection``'s driver connection, registered on it the first time
    (then None: what was raised before is not known)."""
    raw = connection.connection
    if raw is None:
        return None
    heard = _heard.get(raw)
    if heard is None:
        heard = _heard[raw] = Heard()
        raw.add_notice_handler(heard)
        return None
    return heard


def on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created``: hear the triggers from a connection's first statement on."""
    raw = connection.connection
    if raw is not None and raw not in _heard and usable(connection):
        heard = _heard[raw] = Heard()
        raw.add_notice_handler(heard)


def heard_on(connection: BaseDatabaseWrapper, model: type[models.Model]) -> Heard | None:
    """What ``connection`` heard, when ``model``'s table has the current trigger and the
    connection heard it from the start; None: ask the database (:mod:`.judging`)."""
    key = (connection.alias, model, generation())
    found = _found.get(key)
    if found is None or found[1] <= time.monotonic():
        if len(_found) > 1000:  # declarations changing all the time (tests): start afresh
            _found.clear()
        found = _found[key] = (_trusted(connection, model), time.monotonic() + TRUST_SECONDS)
    return listen(connection) if found[0] else None


def _trusted(connection: BaseDatabaseWrapper, model: type[models.Model]) -> bool:
    concrete = model._meta.concrete_model
    if not usable(connection) or not enabled() or concrete is None or not fits(concrete):
        return False
    labels = watched_tables().get(model._meta.db_table, (model, []))[1]
    if model._meta.label_lower not in labels:
        return False
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid WHERE t.tgrelid = "
                "to_regclass(%s) AND t.tgname = %s AND p.proname = %s AND t.tgenabled <> 'D'",
                [connection.ops.quote_name(model._meta.db_table), TRIGGER, function_name(connection, model, labels)],
            )
            return cursor.fetchone() is not None
    except DatabaseError:
        return False


def forget(**kwargs: Any) -> None:
    """Look for every table's trigger again (after ``migrate``, or the settings changed)."""
    _found.clear()


def function_name(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str]) -> str:
    """The trigger function of ``model``'s table for the models ``labels``, named by its body (at
    most 63 characters): a new set of models, or a ``met`` changed, is a new function."""
    digest = hashlib.sha256(_body(connection, model, labels).encode()).hexdigest()[:16]
    return f"{TRIGGER}_v{VERSION}_{digest}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _body(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str]) -> str:
    """The trigger function's body: for the row written, each watched model's judgement
    (:mod:`.judging`'s statement, written out); a NOTICE naming the row when a job is met, its
    row gone, its met a callable, or the judgement fails; nothing when none is pending or none
    is met."""
    qn = connection.ops.quote_name
    pk = model._meta.pk
    assert pk is not None
    table, column = qn(model._meta.db_table), qn(str(pk.column))
    said = f"RAISE NOTICE '{PREFIX}%:%', {_literal(model._meta.db_table)}, {judging.KEY_VARIABLE};"
    loops = []
    for label in sorted(labels):
        compiled = judging.statement(label, connection.alias)
        sql = judging.inlined(compiled, connection.alias) if compiled is not None else None
        if sql is None:  # cannot be written out: every pending job of the row is named
            sql = (f"SELECT job_exec, NULL::boolean, true FROM {qn(FutureJob._meta.db_table)} WHERE entity_name = "
                   f"{_literal(label)} AND entity_key = {judging.KEY_VARIABLE} AND kind = {_literal(KIND)}")
        loops.append(f"""    FOR job_name, met, present IN {sql} LOOP
      IF met IS NOT false OR NOT present THEN
        {said}
        RETURN NULL;
      END IF;
    END LOOP;""")
    joined = "\n".join(loops)
    return f"""DECLARE
  {judging.PK_VARIABLE} {table}.{column}%TYPE := CASE WHEN TG_OP = 'DELETE' THEN OLD.{column} ELSE NEW.{column} END;
  {judging.KEY_VARIABLE} text := {judging.PK_VARIABLE}::text;
  job_name text;
  met boolean;
  present boolean;
BEGIN
  BEGIN
{joined}
  EXCEPTION WHEN OTHERS THEN
    {said}
  END;
  RETURN NULL;
END"""


def install_sql(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str]) -> list[str]:
    """The statements that give ``model``'s table its trigger for the watched models ``labels``
    (proxies share their table), replacing an older one. ``SET client_min_messages``: the notice
    reaches the client whatever the host set; the inner block's ``EXCEPTION``: a judgement that
    fails names the row (judged by asking), never fails the host's commit."""
    table, function = connection.ops.quote_name(model._meta.db_table), function_name(connection, model, labels)
    return [
        (f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql "
         f"SET client_min_messages = notice AS $prescient$\n{_body(connection, model, labels)}\n$prescient$"),
        f"DROP TRIGGER IF EXISTS {TRIGGER} ON {table}",
        (f"CREATE CONSTRAINT TRIGGER {TRIGGER} AFTER UPDATE OR DELETE ON {table} "
         f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {function}()"),
    ]


#: Primary keys whose text in PostgreSQL (``pk::text``) is Python's ``str(pk)``, the job's key.
KEYS_AS_TEXT = frozenset({
    "AutoField", "BigAutoField", "SmallAutoField", "IntegerField", "BigIntegerField", "SmallIntegerField",
    "PositiveIntegerField", "PositiveBigIntegerField", "PositiveSmallIntegerField", "CharField", "SlugField",
    "TextField", "UUIDField",
})


def fits(model: type[models.Model]) -> bool:
    """Whether a trigger can name ``model``'s rows as the jobs do: a primary key whose text is
    the job's key, and no parent table (a child of multi-table inheritance may be saved by an
    update of its parent's table alone)."""
    pk = model._meta.pk
    return pk is not None and not model._meta.parents and pk.get_internal_type() in KEYS_AS_TEXT


def watched_tables() -> dict[str, tuple[type[models.Model], list[str]]]:
    """The tables of the installed models some registered expectation watches: for each, its
    concrete model and the labels watched on it (a proxy shares its model's table). Children of
    multi-table inheritance are left out (judged the slow way)."""
    found: dict[str, tuple[type[models.Model], list[str]]] = {}
    for entry in registered():
        try:
            model = apps.get_model(entry.model_label)
        except LookupError:
            continue  # reported by the system checks
        concrete = model._meta.concrete_model
        if not fits(concrete):
            continue
        labels = found.setdefault(concrete._meta.db_table, (concrete, []))[1]
        if model._meta.label_lower not in labels:
            labels.append(model._meta.label_lower)
    return found


def missing(using: str = "default") -> list[str]:
    """The watched tables on ``using`` without their current trigger (none off PostgreSQL)."""
    connection = connections[using]
    if not usable(connection) or not enabled():
        return []
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
    if FutureJob._meta.db_table not in tables:
        return []  # not migrated yet: migrate installs them
    return sorted(table for table, (model, labels) in watched_tables().items()
                  if table in tables and _function_of(connection, table) != function_name(connection, model, labels))


def _function_of(connection: BaseDatabaseWrapper, table: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE t.tgrelid = to_regclass(%s) AND t.tgname = %s",
            [connection.ops.quote_name(table), TRIGGER],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def sync(using: str = "default") -> tuple[list[str], list[str]]:
    """Give each watched table on ``using`` its current trigger and take it from every other
    table; returns (tables given it, tables it was taken from). Nothing off PostgreSQL."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return [], []
    wanted = watched_tables() if enabled() else {}
    given: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, p.proname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE t.tgname = %s AND n.nspname = ANY(current_schemas(false))",
            [TRIGGER],
        )
        existing = dict(cursor.fetchall())
        tables = set(connection.introspection.table_names(cursor))
        if FutureJob._meta.db_table not in tables:
            wanted = {}  # prescient's tables live elsewhere: a trigger here could never find a job
        taken = sorted(table for table in existing if table not in wanted)
        for table in taken:
            cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {connection.ops.quote_name(table)}")
        for table, (model, labels) in sorted(wanted.items()):
            if existing.get(table) == function_name(connection, model, labels) or table not in tables:
                continue
            for statement in install_sql(connection, model, labels):
                cursor.execute(statement)
            given.append(table)
        # Functions no trigger uses any more (older versions, tables no longer watched).
        cursor.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname LIKE %s AND n.nspname = ANY(current_schemas(false)) "
            "AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgfoid = p.oid)",
            [TRIGGER + r"\_v%"],
        )
        for (function,) in cursor.fetchall():
            cursor.execute(f"DROP FUNCTION IF EXISTS {function}()")
    forget()
    if given or taken:
        logger.info("save notices: trigger given to %s, taken from %s", given or "no table", taken or "no table")
    return given, taken


def on_post_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """``post_migrate`` (sent once per app migrated): the triggers follow the watched models."""
    if getattr(sender, "label", None) != "prescient":
        return
    try:
        sync(using)
    except DatabaseError as exc:  # e.g. no right to create triggers: saves are judged the slow way
        logger.warning("save notices: could not install the triggers on %s (%s); saves of watched models "
                       "are judged by asking after each commit", using, exc)


class _Noted:
    """The rows one transaction saved or deleted, each judged once when it commits: by the
    first of its on-commit callbacks to run (one is registered per save, so a test's
    captureOnCommitCallbacks, which runs only those registered inside it, judges the saves made
    inside it, and a savepoint rolled back takes its own callbacks with it)."""

    def __init__(self, hooks: list[Any], using: str) -> None:
        self.hooks = hooks  # the connection's on-commit list this transaction registers in
        self.using = using
        self.judged: set[tuple[type[models.Model], Any]] = set()

    def judge(self, model: type[models.Model], pk: Any) -> None:
        if (model, pk) in self.judged:
            return
        connection = connections[self.using]
        # Still inside a transaction: the commit was not the database's (a test's
        # captureOnCommitCallbacks), no trigger spoke: ask, and again at the next such commit.
        committed = not connection.in_atomic_block
        heard = None
        if committed:
            self.judged.add((model, pk))
            heard = heard_on(connection, model)
        if heard is None or heard.take(model._meta.db_table, pk):
            judging.judge_safely(model._meta.label_lower, pk)


def note(instance: models.Model, using: str) -> None:
    """``instance`` was saved or deleted on ``using``: judge its pending expectations once that
    transaction commits (at once in autocommit; in the transaction itself under manual
    transaction management, where nothing tells when it commits), if its table's trigger named
    it at the commit or there is no trigger to ask."""
    model, pk = type(instance), instance.pk
    if pk is None:
        return
    # Compiled once per declaration (a dict read after): a met that cannot be compiled is
    # logged at the first save, asked or not (manage.py check says it first, prescient.E032).
    judging.statement(model._meta.label_lower, using)
    connection = connections[using]
    if not connection.in_atomic_block:
        # Autocommit off (transactions managed by hand): judged now, in the transaction, before
        # any trigger spoke.
        heard = heard_on(connection, model) if connection.get_autocommit() else None
        named = heard is None or heard.take(model._meta.db_table, pk)
        _settle(connection)  # the statement has committed: whatever else was named is past
        if named:
            judging.judge_safely(model._meta.label_lower, pk)
        return
    noted = getattr(connection, "_prescient_noted", None)
    if noted is None or noted.hooks is not connection.run_on_commit:  # committed or rolled back since
        noted = _Noted(connection.run_on_commit, using)
        connection._prescient_noted = noted  # type: ignore[attr-defined]
        _settle(connection)  # what earlier statements named is past: this one's comes at its commit
    transaction.on_commit(functools.partial(noted.judge, model, pk), using=using)


def _settle(connection: BaseDatabaseWrapper) -> None:
    """Forget what ``connection``'s triggers named so far (a trigger of an older body, a raw
    UPDATE): a later save of the same row would otherwise be judged once for nothing."""
    if connection.connection is not None and usable(connection):
        heard = _heard.get(connection.connection)
        if heard is not None:
            heard.settle()
