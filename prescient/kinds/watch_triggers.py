"""The triggers ``migrate`` gives each table an expectation watches, on PostgreSQL.

Two statement-level triggers per table, ``prescient_watch`` (``AFTER UPDATE``, the rows written
as a transition table) and ``prescient_watch_gone`` (``AFTER DELETE``, the rows deleted), share
one function. At the end of each statement it looks up, for each row written, whether it has a
pending expectation (an index probe of the live table inside the executor, not a call per row);
for those rows only it calls the table's judgement function, :mod:`.judging`'s statement
written out (the pending jobs, each ``met`` Q asked beside them, the row's existence), and
raises a NOTICE naming the row when there is something to end: a job met, its row gone, or a
``met`` only Python can ask (a callable). The judgement is a function of its own: a trigger
function that reads transition tables plans its queries at every call, a plain one keeps its
plans for the session. A new row (``INSERT``) has no expectation yet: no trigger.

The function's name carries a digest of its body: a model watched, or a ``met`` changed, since
the last ``migrate`` is a new body, and the table's trigger is not trusted until ``migrate``
(:func:`sync`, from ``post_migrate``) installs it. A judgement that fails names the row (judged
in Python, which says why); a statement whose rows cannot even be looked up (prescient's table
gone) names every row (:data:`EVERY_ROW`); neither ever fails the host's statement.
"""

from __future__ import annotations

import hashlib
import logging

from django.apps import apps
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from prescient.expectations import KIND, registered
from prescient.models import FutureJob

from . import judging

logger = logging.getLogger(__name__)

TRIGGER, GONE_TRIGGER = "prescient_watch", "prescient_watch_gone"
#: In the function's name: a new version of its body replaces the old at the next migrate.
VERSION = 2
PREFIX = "prescient-judge "
#: What a NOTICE says when the rows could not be looked up: judge every row noted.
EVERY_ROW = "*"

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
    multi-table inheritance are left out (judged by asking)."""
    found: dict[str, tuple[type[models.Model], list[str]]] = {}
    for entry in registered():
        try:
            model = apps.get_model(entry.model_label)
        except LookupError:
            continue  # reported by the system checks
        concrete = model._meta.concrete_model
        if concrete is None or not fits(concrete):
            continue
        labels = found.setdefault(concrete._meta.db_table, (concrete, []))[1]
        if model._meta.label_lower not in labels:
            labels.append(model._meta.label_lower)
    return found


def function_name(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str]) -> str:
    """The trigger function of ``model``'s table for the models ``labels``, named by its body (at
    most 63 characters): a new set of models, or a ``met`` changed, is a new function."""
    digest = hashlib.sha256(_body(connection, model, labels).encode()).hexdigest()[:16]
    return f"{TRIGGER}_v{VERSION}_{digest}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _body(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str]) -> str:
    """Both functions' bodies, for the digest in their name."""
    return _judge_body(connection, model, labels) + _trigger_body(connection, model, labels, "{judge}")


def _judge_body(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str]) -> str:
    """The judgement of one row (a function of its own: a trigger function that reads transition
    tables plans its queries at every call, a plain one keeps them for the session): true when
    the row has a job to end, or its judgement fails."""
    jobs = connection.ops.quote_name(FutureJob._meta.db_table)
    key = judging.KEY_VARIABLE
    loops = []
    for label in sorted(labels):
        compiled = judging.statement(label, connection.alias)
        sql = judging.inlined(compiled, connection.alias) if compiled is not None else None
        if sql is None:  # cannot be written out: every pending job of the row is named
            sql = (f"SELECT job_exec, NULL::boolean, true FROM {jobs} WHERE entity_name = {_literal(label)} "
                   f"AND entity_key = {key} AND kind = {_literal(KIND)}")
        loops.append(f"""  FOR job_name, met, present IN {sql} LOOP
    IF met IS NOT false OR NOT present THEN
      RETURN true;
    END IF;
  END LOOP;""")
    joined = "\n".join(loops)
    return f"""DECLARE
  {key} text := {judging.PK_VARIABLE}::text;
  job_name text;
  met boolean;
  present boolean;
BEGIN
{joined}
  RETURN false;
EXCEPTION WHEN OTHERS THEN
  RETURN true;
END"""


def _trigger_body(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str], judge: str) -> str:
    qn = connection.ops.quote_name
    pk = model._meta.pk
    assert pk is not None
    table, column, jobs = qn(model._meta.db_table), qn(str(pk.column)), qn(FutureJob._meta.db_table)
    said = _literal(model._meta.db_table)
    names = ", ".join(_literal(label) for label in sorted(labels))
    # OFFSET 0: a sub-plan probing the live table's index per row, never a semi-join reading the
    # whole live table for a one-row UPDATE (the planner cannot tell a transition table's size).
    pending = (f"EXISTS (SELECT 1 FROM {jobs} j WHERE j.entity_name IN ({names}) AND j.entity_key = "
               f"r.{column}::text AND j.kind = {_literal(KIND)} OFFSET 0)")
    row = judging.PK_VARIABLE
    return f"""DECLARE
  {row} {table}.{column}%TYPE;
BEGIN
  IF TG_OP = 'DELETE' THEN
    FOR {row} IN SELECT r.{column} FROM prescient_gone r WHERE {pending} LOOP
      RAISE NOTICE '{PREFIX}%:%', {said}, {row}::text;
    END LOOP;
  ELSE
    -- CASE: only the rows with a job pending are judged (the planner may not reorder it).
    FOR {row} IN SELECT r.{column} FROM prescient_written r
                 WHERE CASE WHEN {pending} THEN {judge}(r.{column}) ELSE false END LOOP
      RAISE NOTICE '{PREFIX}%:%', {said}, {row}::text;
    END LOOP;
  END IF;
  RETURN NULL;
EXCEPTION WHEN OTHERS THEN
  RAISE NOTICE '{PREFIX}%:{EVERY_ROW}', {said};
  RETURN NULL;
END"""


def install_sql(connection: BaseDatabaseWrapper, model: type[models.Model], labels: list[str]) -> list[str]:
    """The statements that give ``model``'s table its triggers for the watched models ``labels``
    (proxies share their table), replacing older ones. ``SET client_min_messages``: the notice
    reaches the client whatever the host set."""
    qn = connection.ops.quote_name
    pk = model._meta.pk
    assert pk is not None
    table, function = qn(model._meta.db_table), function_name(connection, model, labels)
    judge = function + "_judge"
    column_type = f"{table}.{qn(str(pk.column))}%TYPE"
    return [
        (f"CREATE OR REPLACE FUNCTION {judge}({judging.PK_VARIABLE} {column_type}) RETURNS boolean "
         f"LANGUAGE plpgsql AS $prescient$\n{_judge_body(connection, model, labels)}\n$prescient$"),
        (f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql SET client_min_messages = "
         f"notice AS $prescient$\n{_trigger_body(connection, model, labels, judge)}\n$prescient$"),
        *drop_sql(connection, model._meta.db_table),
        (f"CREATE TRIGGER {TRIGGER} AFTER UPDATE ON {table} REFERENCING NEW TABLE AS prescient_written "
         f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"),
        (f"CREATE TRIGGER {GONE_TRIGGER} AFTER DELETE ON {table} REFERENCING OLD TABLE AS prescient_gone "
         f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"),
    ]


def drop_sql(connection: BaseDatabaseWrapper, table: str) -> list[str]:
    quoted = connection.ops.quote_name(table)
    return [f"DROP TRIGGER IF EXISTS {name} ON {quoted}" for name in (TRIGGER, GONE_TRIGGER)]


def installed_function(connection: BaseDatabaseWrapper, table: str) -> str | None:
    """The function both of ``table``'s triggers run, enabled; None when either is missing,
    disabled, or they differ."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.tgname, p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE t.tgrelid = to_regclass(%s) AND t.tgname IN (%s, %s) AND t.tgenabled <> 'D'",
            [connection.ops.quote_name(table), TRIGGER, GONE_TRIGGER],
        )
        functions = dict(cursor.fetchall())
    if set(functions) != {TRIGGER, GONE_TRIGGER} or len(set(functions.values())) != 1:
        return None
    return str(functions[TRIGGER])


def missing(using: str = "default") -> list[str]:
    """The watched tables on ``using`` without their current triggers (PostgreSQL only)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
    if FutureJob._meta.db_table not in tables:
        return []  # not migrated yet: migrate installs them
    return sorted(
        table for table, (model, labels) in watched_tables().items()
        if table in tables and installed_function(connection, table) != function_name(connection, model, labels)
    )


def sync(using: str = "default", *, wanted: bool = True) -> tuple[list[str], list[str]]:
    """Give each watched table on ``using`` its current triggers and take them from every other
    table (from all with ``wanted=False``); returns (tables given them, tables they were taken
    from). Nothing off PostgreSQL."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return [], []
    tables_wanted = watched_tables() if wanted else {}
    given: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE t.tgname IN (%s, %s) AND n.nspname = ANY(current_schemas(false))",
            [TRIGGER, GONE_TRIGGER],
        )
        existing = {row[0] for row in cursor.fetchall()}
        tables = set(connection.introspection.table_names(cursor))
        if FutureJob._meta.db_table not in tables:
            tables_wanted = {}  # prescient's tables live elsewhere: a trigger here could never find a job
        taken = sorted(table for table in existing if table not in tables_wanted)
        for table in taken:
            for statement in drop_sql(connection, table):
                cursor.execute(statement)
        for table, (model, labels) in sorted(tables_wanted.items()):
            if table not in tables or installed_function(connection, table) == function_name(connection, model, labels):
                continue
            for statement in install_sql(connection, model, labels):
                cursor.execute(statement)
            given.append(table)
        # Functions no trigger runs any more (older versions, tables no longer watched), and
        # their judgements.
        cursor.execute(
            "SELECT p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.proname LIKE %s "
            "AND n.nspname = ANY(current_schemas(false)) AND NOT EXISTS (SELECT 1 FROM pg_trigger t "
            "WHERE t.tgfoid = p.oid OR (p.proname LIKE '%%\\_judge' AND t.tgfoid IN (SELECT q.oid FROM pg_proc q "
            "WHERE q.proname || '_judge' = p.proname)))",
            [TRIGGER + r"\_v%"],
        )
        for function, arguments in cursor.fetchall():
            cursor.execute(f"DROP FUNCTION IF EXISTS {function}({arguments})")
    if given or taken:
        logger.info("save notices: triggers given to %s, taken from %s", given or "no table", taken or "no table")
    return given, taken
