"""The history table partitioned by ``finished_at`` on PostgreSQL (docs/operations.md, "History
partitions"); other databases keep one table, and Django's state of the model is unchanged.

Plain SQL, not a library: django-postgres-extra would have the host replace its database
backend (``ENGINE``) for one table of a pluggable app, and nothing here needs more than a few
statements. The conversion, in the migration's one transaction:

1. ``LOCK TABLE … ACCESS EXCLUSIVE``: no job ends (each inserts a history row) and no page
   reads the history until it commits; about 9 s per million rows (measured, see the docs).
2. A partitioned table ``PARTITION BY RANGE (finished_at)`` made ``LIKE`` the old one (columns,
   defaults, CHECK constraints, the identity of ``id``), one partition per month from the month
   of the oldest row to two months past the newest row or now, and a DEFAULT partition, so that
   no insert ever fails for want of a partition. The upkeep duty ``history_partitions`` then
   makes the partitions ahead of time, by the ``HISTORY_PARTITION`` setting.
3. The rows copied (``INSERT … SELECT``), the old table dropped, the new one renamed; its
   identity sequence renamed as Django names it and set past the highest id ever given.
4. The primary key ``(id, finished_at)`` (PostgreSQL wants the partition key in every unique
   index; ids stay unique, all drawn from the one sequence, and Django still treats ``id`` as the
   primary key) and the old table's indexes, built once after the copy, as partitioned indexes
   of the same names.

A table already partitioned is left alone, and so is a table already plain on the way back, so
the migration may be faked or run twice. Nothing references the history table by a foreign key
(``rerun_of`` is a plain integer). Going back converts the other way, the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import migrations

TABLE = "prescient_jobhistory"
PKEY = f"{TABLE}_pkey"
#: Months made past the newest row (or now): the upkeep makes the rest, but a deployment
#: whose workers start late still has somewhere other than the default for a while.
AHEAD_MONTHS = 2


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        if _relkind(cursor, TABLE) != "r":
            return
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        indexes = _index_definitions(cursor)
        cursor.execute(f"SELECT least(min(finished_at), now()), greatest(max(finished_at), now()) FROM {TABLE}")
        oldest, newest = cursor.fetchone()
        cursor.execute(
            f"CREATE TABLE {TABLE}_new (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY "
            "INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE (finished_at)"
        )
        month, last = _month(oldest), _add_months(_month(newest), AHEAD_MONTHS)
        while month <= last:
            upper = _add_months(month, 1)
            cursor.execute(
                f"CREATE TABLE {TABLE}_p{month:%Y%m} PARTITION OF {TABLE}_new FOR VALUES FROM (%s) TO (%s)",
                [month, upper],
            )
            month = upper
        cursor.execute(f"CREATE TABLE {TABLE}_default PARTITION OF {TABLE}_new DEFAULT")
        _move(cursor, indexes, primary_key="id, finished_at")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        if _relkind(cursor, TABLE) != "p":
            return
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        indexes = [sql.replace(" ON ONLY ", " ON ", 1) for sql in _index_definitions(cursor)]
        cursor.execute(
            f"CREATE TABLE {TABLE}_new (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY "
            "INCLUDING STORAGE INCLUDING COMMENTS)"
        )
        _move(cursor, indexes, primary_key="id")


def _move(cursor, indexes, *, primary_key):
    """The rows of ``TABLE`` copied into ``TABLE_new``, which then takes its place, its
    sequence, its primary key and ``indexes`` (their definitions)."""
    cursor.execute(
        "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        [TABLE],
    )
    (columns,) = cursor.fetchone()
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [TABLE])
    (sequence,) = cursor.fetchone()
    cursor.execute(f"SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {sequence}")
    (next_id,) = cursor.fetchone()
    cursor.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {TABLE}")
    next_id = max(next_id, cursor.fetchone()[0])
    cursor.execute(f"INSERT INTO {TABLE}_new ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM {TABLE}")
    cursor.execute(f"DROP TABLE {TABLE}")
    cursor.execute(f"ALTER TABLE {TABLE}_new RENAME TO {TABLE}")
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [TABLE])
    (created,) = cursor.fetchone()
    if created != sequence:  # the identity's own sequence, named after TABLE_new
        cursor.execute(f"ALTER SEQUENCE {created} RENAME TO {sequence.rsplit('.', 1)[-1]}")
    cursor.execute("SELECT setval(%s, %s, false)", [sequence, next_id])
    cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {PKEY} PRIMARY KEY ({primary_key})")
    for sql in indexes:
        cursor.execute(sql)


def _relkind(cursor, table):
    """'r' for a plain table, 'p' for a partitioned one, None when there is none."""
    cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table])
    row = cursor.fetchone()
    return row[0] if row else None


def _index_definitions(cursor):
    """``CREATE INDEX`` statements of the table's indexes but its primary key's."""
    cursor.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = %s "
        "AND indexname <> %s ORDER BY indexname",
        [TABLE, PKEY],
    )
    return [row[0] for row in cursor.fetchall()]


def _month(when):
    when = when.astimezone(UTC)
    return datetime(when.year, when.month, 1, tzinfo=UTC)


def _add_months(month, count):
    index = month.year * 12 + month.month - 1 + count
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


class Migration(migrations.Migration):

    dependencies = [("prescient", "0023_rerun_links")]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
