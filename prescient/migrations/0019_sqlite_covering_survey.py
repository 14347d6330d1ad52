"""The idle tick's query answered from its indexes alone on SQLite (covering indexes).

The survey (prescient/engine/sweep.py) asks three questions, each of one partial index: a job
due (``prescient_job_due``, where state is scheduled), a stale claim (``prescient_job_in_flight``,
where reserved_by is not empty) and a recurring schedule due (``prescient_schedule_due``, where
paused_at is null). SQLite checks the column of a partial index's condition again on the table's
row, so each index gets that column as its last: ``EXPLAIN QUERY PLAN`` then says ``USING
COVERING INDEX`` for all three, and a job found due costs no row read.

SQLite only; the indexes keep their names, columns first and conditions (the models' state does
not change). PostgreSQL answers these from the same indexes without reading a row of a
partial index's condition column, so its indexes stay as they are.
"""

from django.db import migrations

#: ``(index, table, columns before, the column added, condition)``.
INDEXES = [
    ("prescient_job_due", "prescient_futurejob", ["next_check_at", "id"], "state", "\"state\" = 'scheduled'"),
    ("prescient_job_in_flight", "prescient_futurejob", ["reserved_at"], "reserved_by", "NOT (\"reserved_by\" = '')"),
    ("prescient_schedule_due", "prescient_schedule", ["due_at", "id"], "paused_at", '"paused_at" IS NULL'),
]


def _rebuild(schema_editor, *, covering):
    if schema_editor.connection.vendor != "sqlite":
        return
    qn = schema_editor.quote_name
    for name, table, columns, added, condition in INDEXES:
        names = [*columns, added] if covering else columns
        schema_editor.execute(f"DROP INDEX IF EXISTS {qn(name)}")
        schema_editor.execute(
            f"CREATE INDEX {qn(name)} ON {qn(table)} ({', '.join(qn(c) for c in names)}) WHERE {condition}"
        )


def cover(apps, schema_editor):
    _rebuild(schema_editor, covering=True)


def uncover(apps, schema_editor):
    _rebuild(schema_editor, covering=False)


class Migration(migrations.Migration):
    dependencies = [("prescient", "0018_job_has_dependants")]

    operations = [migrations.RunPython(cover, uncover, elidable=False)]
