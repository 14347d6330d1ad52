"""Every job names its kind. Existing rows are checks, except django.tasks jobs, which 0.1
stored with the entity name ``prescient.task``: those become kind ``task``."""

from django.db import migrations, models

#: The entity name 0.1 gave django.tasks jobs (kept by prescient.kinds.tasks).
TASK_ENTITY = "prescient.task"


def mark_tasks(apps, schema_editor):
    for name in ("FutureJob", "JobHistory"):
        model = apps.get_model("prescient", name)
        model.objects.filter(entity_name=TASK_ENTITY).update(kind="task")


class Migration(migrations.Migration):

    dependencies = [
        ("prescient", "0004_tasks"),
    ]

    operations = [
        migrations.AddField(
            model_name="futurejob",
            name="kind",
            field=models.CharField(db_default="check", default="check", max_length=32, verbose_name="kind"),
        ),
        migrations.AddField(
            model_name="jobhistory",
            name="kind",
            field=models.CharField(db_default="check", default="check", max_length=32, verbose_name="kind"),
        ),
        migrations.RunPython(mark_tasks, migrations.RunPython.noop, elidable=True),
    ]
