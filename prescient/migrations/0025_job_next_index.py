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

from ._concurrently import build, remove

TABLE = "prescient_futurejob"
NAME = "prescient_job_next"


def create(apps, schema_editor):
    build(schema_editor, TABLE, NAME, "(next_check_at, id, state)")


def drop(apps, schema_editor):
    remove(schema_editor, NAME)


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
