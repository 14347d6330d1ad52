"""Expectations' outcomes: ``met`` and ``missed`` (the choices of a history row's outcome and of an
end requested). Choices only: nothing changes in the database's tables."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('prescient', '0015_metrics_tallies'),
    ]

    operations = [
        migrations.AlterField(
            model_name='futurejob',
            name='end_requested',
            field=models.CharField(blank=True, choices=[('completed', 'Completed'), ('max_checks', 'Max checks'), ('horizon', 'Horizon'), ('failed', 'Failed'), ('entity_missing', 'Entity missing'), ('cancelled', 'Cancelled'), ('killed', 'Killed'), ('met', 'Met'), ('missed', 'Missed')], default='', help_text='Set when a job is killed or cancelled while its run is in flight.', max_length=16, verbose_name='end requested'),
        ),
        migrations.AlterField(
            model_name='jobhistory',
            name='outcome',
            field=models.CharField(choices=[('completed', 'Completed'), ('max_checks', 'Max checks'), ('horizon', 'Horizon'), ('failed', 'Failed'), ('entity_missing', 'Entity missing'), ('cancelled', 'Cancelled'), ('killed', 'Killed'), ('met', 'Met'), ('missed', 'Missed')], max_length=16, verbose_name='outcome'),
        ),
    ]
