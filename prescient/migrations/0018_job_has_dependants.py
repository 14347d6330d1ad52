"""``FutureJob.has_dependants``: set on a job once another job is linked to wait on it, so that
settling and ending jobs without dependants skip the link, workflow and waiter statements.

The column has a database default (``false``): adding it rewrites no row on PostgreSQL. Live
jobs that already have links get the flag here."""

from django.db import migrations, models


def flag_live_parents(apps, schema_editor):
    FutureJob = apps.get_model("prescient", "FutureJob")
    JobLink = apps.get_model("prescient", "JobLink")
    FutureJob.objects.filter(pk__in=JobLink.objects.values("parent_id")).update(has_dependants=True)


class Migration(migrations.Migration):

    dependencies = [
        ('prescient', '0017_history_failure'),
    ]

    operations = [
        migrations.AddField(
            model_name='futurejob',
            name='has_dependants',
            field=models.BooleanField(db_default=False, default=False, editable=False, verbose_name='has dependants'),
        ),
        migrations.RunPython(flag_live_parents, migrations.RunPython.noop, elidable=True),
    ]
