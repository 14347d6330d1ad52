"""Checkpoints (on the live job and its history row) and a sleep requested while a run is in flight.

Only nullable columns are added: no row is rewritten, and older code keeps working beside it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("prescient", "0008_workflow_links")]

    operations = [
        migrations.AddField(
            model_name="futurejob",
            name="checkpoint_data",
            field=models.JSONField(
                blank=True, help_text="What the last checkpoint of the job's runs saved.", null=True,
                verbose_name="checkpoint",
            ),
        ),
        migrations.AddField(
            model_name="futurejob",
            name="sleep_until",
            field=models.DateTimeField(
                blank=True,
                help_text="Set when a job is slept while its run is in flight: the job is due then once the run returns.",
                null=True, verbose_name="sleep requested until",
            ),
        ),
        migrations.AddField(
            model_name="jobhistory",
            name="checkpoint_data",
            field=models.JSONField(
                blank=True, help_text="The job's last checkpoint when it ended.", null=True, verbose_name="checkpoint"
            ),
        ),
    ]
