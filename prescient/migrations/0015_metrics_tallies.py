"""The running totals behind the Prometheus counters and histograms (prescient.tallies): a small
table, written in the transaction that settles each run, summed by each scrape."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('prescient', '0014_history_asked_check_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='MetricTally',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job_exec', models.CharField(max_length=200, verbose_name='check')),
                ('queue', models.CharField(blank=True, default='', max_length=100, verbose_name='queue')),
                ('name', models.CharField(max_length=48, verbose_name='figure')),
                ('shard', models.PositiveSmallIntegerField(default=0, verbose_name='shard')),
                ('value', models.FloatField(default=0.0, verbose_name='value')),
            ],
            options={
                'verbose_name': 'metric tally',
                'verbose_name_plural': 'metric tallies',
                'constraints': [
                    models.UniqueConstraint(fields=('job_exec', 'queue', 'name', 'shard'), name='prescient_one_tally'),
                ],
            },
        ),
    ]
