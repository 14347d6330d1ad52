"""Each check's due jobs: ``FutureJob (job_exec, next_check_at, id) WHERE state = 'scheduled'`` (#36).

Past 100,000 live jobs the health of the checks (the dashboard, ``GET health/checks``,
``prescient_status``) read due and oldest overdue per check with a ``GROUP BY`` over every due
job: 1.1 s for a backlog of 666,000 due jobs among ten million. With this index it walks the
checks (one index descent each: a check's first scheduled job, due if its time has come) and
counts each one's due jobs up to a bound (index only). It costs every write of a scheduled job
one more index entry.

Built ``CONCURRENTLY`` on PostgreSQL, as 0025 builds the job list's (so the migration is not
atomic): a plain ``CREATE INDEX`` on a live table of millions of jobs would block every claim
and every schedule while it builds. An interrupted build's invalid index is dropped and built again.
"""

from django.db import migrations, models

from ._concurrently import build, remove

TABLE = "prescient_futurejob"
NAME = "prescient_job_check_due"
COLUMNS = "(job_exec, next_check_at, id) WHERE state = 'scheduled'"


def create(apps, schema_editor):
    build(schema_editor, TABLE, NAME, COLUMNS)


def drop(apps, schema_editor):
    remove(schema_editor, NAME)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("prescient", "0025_job_next_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="futurejob",
                    index=models.Index(
                        condition=models.Q(state="scheduled"),
                        fields=["job_exec", "next_check_at", "id"],
                        name=NAME,
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(create, drop, elidable=False)],
        ),
    ]
