"""The history keeps the next check a ``horizon`` outcome's check asked for (#28 item 7).

Before, the time and the reason were only logged; the reason now goes to the existing ``reason``
column (a horizon's, or an error handler's that gave up: "error rate exceeded …"). A nullable
column: adding it rewrites nothing, and the rows written before it keep NULL.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("prescient", "0013_reserved_and_priority_claims"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobhistory",
            name="asked_check_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="check asked for"),
        ),
    ]
