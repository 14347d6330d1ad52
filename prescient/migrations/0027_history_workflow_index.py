"""The history's rows of a workflow: ``JobHistory (workflow) WHERE NOT workflow = ''`` (#36).

The history's search box takes an entity key or a workflow name (``42`` matches either), and
the search is one ``OR`` of the two. The entity index answered its half, but nothing answered
the workflow's, so PostgreSQL walked the whole history in ``finished_at`` order, filtering:
1.8 s at ten million rows, for a key found once. With this index both halves are index lookups
(a ``BitmapOr``). Only the rows of a workflow are in it, so a history of jobs outside workflows
pays next to nothing for it.

Built without blocking a job's ending: ``CONCURRENTLY`` on each of the history's partitions on
PostgreSQL (see ``_concurrently``), so the migration is not atomic.
"""

from django.db import migrations, models

from ._concurrently import build, remove

TABLE = "prescient_jobhistory"
NAME = "prescient_hist_workflow"
COLUMNS = "(workflow) WHERE NOT workflow = ''"


def create(apps, schema_editor):
    build(schema_editor, TABLE, NAME, COLUMNS)


def drop(apps, schema_editor):
    remove(schema_editor, NAME)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("prescient", "0026_job_check_due_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="jobhistory",
                    index=models.Index(
                        condition=models.Q(("workflow", ""), _negated=True),
                        fields=["workflow"],
                        name=NAME,
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(create, drop, elidable=False)],
        ),
    ]
