from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("bench", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Parcel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("stamp", models.FloatField(null=True)),
            ],
        ),
    ]
