"""The history's names in the admin: "finished job" / "finished jobs" ("2 job history" read badly).

Options only: nothing changes in the database. It follows 0010; the retention work's 0011 is
chained before it when both land.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("prescient", "0011_history_finished_at_index"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="jobhistory",
            options={
                "ordering": ["-finished_at", "-id"],
                "verbose_name": "finished job",
                "verbose_name_plural": "finished jobs",
            },
        ),
    ]
