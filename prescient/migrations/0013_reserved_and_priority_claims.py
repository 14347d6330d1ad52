"""A state of its own for a claimed job whose code has not started (``reserved``), and the claim's
index (highest priority first, then oldest).

Rows are moved so that none is left in a state the new table cannot explain: a claim whose run
never started becomes ``reserved``; a job paused while so claimed (which the old code would hand
back unstarted, remembering ``running``) is handed back now, remembering ``scheduled``.
"""

from django.db import migrations, models


def claims_not_started_are_reserved(apps, schema_editor):
    FutureJob = apps.get_model("prescient", "FutureJob")
    FutureJob.objects.filter(state="running", run_started_at__isnull=True).exclude(reserved_by="").update(
        state="reserved"
    )
    FutureJob.objects.filter(state="paused", last_state="running", run_started_at__isnull=True).update(
        last_state="scheduled", reserved_by="", reserved_at=None
    )


def reserved_are_running(apps, schema_editor):
    FutureJob = apps.get_model("prescient", "FutureJob")
    FutureJob.objects.filter(state="reserved").update(state="running")
    FutureJob.objects.filter(last_state="reserved").update(last_state="scheduled")


class Migration(migrations.Migration):

    dependencies = [
        ('prescient', '0012_history_verbose_names'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='futurejob',
            name='prescient_state_valid',
        ),
        migrations.AlterField(
            model_name='futurejob',
            name='last_state',
            field=models.CharField(blank=True, choices=[('scheduled', 'Scheduled'), ('reserved', 'Reserved'), ('running', 'Running'), ('paused', 'Paused'), ('buried', 'Buried'), ('waiting', 'Waiting')], default='', help_text='The state a paused job returns to on release.', max_length=16, verbose_name='last state'),
        ),
        migrations.AlterField(
            model_name='futurejob',
            name='state',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('reserved', 'Reserved'), ('running', 'Running'), ('paused', 'Paused'), ('buried', 'Buried'), ('waiting', 'Waiting')], default='scheduled', max_length=16, verbose_name='state'),
        ),
        migrations.RunPython(claims_not_started_are_reserved, reserved_are_running, elidable=True),
        migrations.AddIndex(
            model_name='futurejob',
            index=models.Index(condition=models.Q(('state', 'scheduled')), fields=['-priority', 'next_check_at', 'id'], name='prescient_job_claim'),
        ),
        migrations.AddConstraint(
            model_name='futurejob',
            constraint=models.CheckConstraint(condition=models.Q(('state__in', ['scheduled', 'reserved', 'running', 'paused', 'buried', 'waiting'])), name='prescient_state_valid'),
        ),
    ]
