"""An index built ``CONCURRENTLY`` on PostgreSQL, for the migrations that add one to a table
that may hold millions of rows (0011, 0025, 0026, 0027; each is ``atomic = False``).

A plain ``CREATE INDEX`` on the live table would block every claim and every schedule while it
builds, and on the history every job's ending. A build that was interrupted leaves an invalid
index behind: it is dropped and built again. Other databases build it plainly. Not a migration
itself: Django's loader skips modules whose names start with ``_``.

PostgreSQL refuses ``CONCURRENTLY`` on a partitioned table (the history, since 0024), so there
the index is made the way its documentation gives: ``ON ONLY`` the parent (invalid, and built
on no row), then each partition's own ``CONCURRENTLY``, each attached to the parent's; the
parent's turns valid with the last. A partition made meanwhile (the upkeep's) gets its own when
it is attached. Run again after an interruption, it builds only what is missing.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, OperationalError

#: The longest a statement that locks the history for a moment (the parent's index made ``ON
#: ONLY``, each attach) waits for its lock: behind a long transaction it gives up, rather than
#: queue every job's ending behind it; the migration is then run again. Tried this many times.
LOCK_TIMEOUT = "2s"
LOCK_TRIES = 3


def build(schema_editor: Any, table: str, name: str, definition: str) -> None:
    """``CREATE INDEX name ON table definition`` (``definition``: the columns, and a ``WHERE``)."""
    qn = schema_editor.quote_name
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {qn(name)} ON {qn(table)} {definition}")
        return
    if _relkind(schema_editor, table) == "p":
        _build_partitioned(schema_editor, table, name, definition)
        return
    _build_concurrently(schema_editor, table, name, definition)


def remove(schema_editor: Any, name: str) -> None:
    """``DROP INDEX name`` (``CONCURRENTLY`` on PostgreSQL, but for a partitioned table's
    index, which PostgreSQL drops only plainly: a change of the catalog and the files' removal)."""
    qn = schema_editor.quote_name
    concurrently = ""
    if schema_editor.connection.vendor == "postgresql" and _relkind(schema_editor, name) != "I":
        concurrently = " CONCURRENTLY"
    schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {qn(name)}")


def _build_concurrently(schema_editor: Any, table: str, name: str, definition: str) -> None:
    qn = schema_editor.quote_name
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
            [name],
        )
        row = cursor.fetchone()
    if row is not None and not row[0]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(name)}")
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {qn(name)} ON {qn(table)} {definition}")


def _build_partitioned(schema_editor: Any, table: str, name: str, definition: str) -> None:
    qn = schema_editor.quote_name
    _briefly(schema_editor, f"CREATE INDEX IF NOT EXISTS {qn(name)} ON ONLY {qn(table)} {definition}")
    for partition in _partitions_without(schema_editor, table, name):
        own = partition_index_name(partition, definition)
        _build_concurrently(schema_editor, partition, own, definition)
        _briefly(schema_editor, f"ALTER INDEX {qn(name)} ATTACH PARTITION {qn(own)}")


def _briefly(schema_editor: Any, sql: str) -> None:
    """``sql`` under :data:`LOCK_TIMEOUT`, tried :data:`LOCK_TRIES` times; then a clear error."""
    for attempt in range(1, LOCK_TRIES + 1):
        schema_editor.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        try:
            schema_editor.execute(sql)
            return
        except DatabaseError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "55P03":  # not lock_not_available
                raise
            if attempt == LOCK_TRIES:
                raise OperationalError(
                    f"{sql}: its lock was not granted within {LOCK_TIMEOUT}, {LOCK_TRIES} times (a long "
                    "transaction on the history?); nothing is lost, run migrate again"
                ) from exc
        finally:
            schema_editor.execute("RESET lock_timeout")


def partition_index_name(partition: str, definition: str) -> str:
    """The name PostgreSQL gives a partition's own index when it makes one (at ``ATTACH
    PARTITION``): the partition's, the columns', ``idx`` (``prescient_jobhistory_p202611`` and
    ``(workflow) WHERE …``: ``prescient_jobhistory_p202611_workflow_idx``). Every partition's
    then looks alike, whichever made it."""
    columns = definition[definition.index("(") + 1:definition.index(")")]
    return "_".join([partition, *(column.strip() for column in columns.split(",")), "idx"])[:63]


def _partitions_without(schema_editor: Any, table: str, name: str) -> list[str]:
    """The partitions of ``table`` that have no index attached to its index ``name``."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits p JOIN pg_class c ON c.oid = p.inhrelid "
            "WHERE p.inhparent = %s::regclass AND NOT EXISTS ("
            " SELECT 1 FROM pg_inherits a JOIN pg_index x ON x.indexrelid = a.inhrelid"
            " WHERE a.inhparent = %s::regclass AND x.indrelid = c.oid) ORDER BY c.relname",
            [table, name],
        )
        return [row[0] for row in cursor.fetchall()]


def _relkind(schema_editor: Any, relation: str) -> str | None:
    """``r`` a table, ``p`` a partitioned one, ``i`` an index, ``I`` a partitioned one's."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [relation])
        row = cursor.fetchone()
    return row[0] if row else None
