"""An index built ``CONCURRENTLY`` on PostgreSQL, for the migrations that add one to a table
that may hold millions of rows (0011, 0025, 0026; each is ``atomic = False``).

A plain ``CREATE INDEX`` on the live table would block every claim and every schedule while it
builds, and on the history every job's ending. A build that was interrupted leaves an invalid
index behind: it is dropped and built again. Other databases build it plainly. Not a migration
itself: Django's loader skips modules whose names start with ``_``.
"""

from __future__ import annotations

from typing import Any


def build(schema_editor: Any, table: str, name: str, definition: str) -> None:
    """``CREATE INDEX name ON table definition`` (``definition``: the columns, and a ``WHERE``)."""
    qn = schema_editor.quote_name
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {qn(name)} ON {qn(table)} {definition}")
        return
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


def remove(schema_editor: Any, name: str) -> None:
    """``DROP INDEX name`` (``CONCURRENTLY`` on PostgreSQL)."""
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(name)}")
