"""The job list's index: ``FutureJob (next_check_at, id, state)``, every state (#36 item 1).

The admin's job list is ordered by the next check, and its date drill-down reads the first and
last of them. The due indexes hold scheduled jobs only, so at ten million live jobs the first
page sorted the whole table (3.3 s measured) and MIN/MAX read it all (1.1 s); with this index
both read a page of entries. It costs every write of a job one more index entry. ``state`` is
its last column so that a due query the planner sends to it (rather than to the due indexes)
tests each entry's state in the index, never visiting the rows of paused or running jobs that
sort before the due ones; with it, the planner keeps the smaller partial indexes for them.

Built ``CONCURRENTLY`` on PostgreSQL, as 0011 builds the history's (so the migration is not
atomic): a plain ``CREATE INDEX`` on a live table of millions of jobs would block every claim
and every schedule while it builds. An interrupted build's invalid index is dropped and built again.
"""

from django.db import migrations, models

TABLE = "prescient_futurejob"
NAME = "prescient_job_next"


def create(apps, schema_editor):
    qn = schema_editor.quote_name
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {qn(NAME)} ON {qn(TABLE)} (next_check_at, id, state)")
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
            [NAME],
        )
        row = cursor.fetchone()
    if row is not None and not row[0]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(NAME)}")
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {qn(NAME)} ON {qn(TABLE)} (next_check_at, id, state)")


def drop(apps, schema_editor):
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(NAME)}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("prescient", "0024_history_partitions")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="futurejob",
                    index=models.Index(fields=["next_check_at", "id", "state"], name=NAME),
                ),
            ],
            database_operations=[migrations.RunPython(create, drop, elidable=False)],
        ),
    ]
