from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('prescient', '0007_schedules'),
    ]

    operations = [
        migrations.CreateModel(
            name='JobLink',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('parent_id', models.BigIntegerField(verbose_name='parent job id')),
                ('child_id', models.BigIntegerField(verbose_name='child job id')),
                ('on_parent_failure', models.CharField(choices=[('cancel', 'Cancel'), ('run', 'Run')], default='cancel', max_length=8, verbose_name='on parent failure')),
                ('created_at', models.DateTimeField(verbose_name='created at')),
            ],
            options={
                'verbose_name': 'job link',
                'verbose_name_plural': 'job links',
            },
        ),
        migrations.RemoveConstraint(
            model_name='futurejob',
            name='prescient_state_valid',
        ),
        migrations.AlterField(
            model_name='futurejob',
            name='last_state',
            field=models.CharField(blank=True, choices=[('scheduled', 'Scheduled'), ('running', 'Running'), ('paused', 'Paused'), ('buried', 'Buried'), ('waiting', 'Waiting')], default='', help_text='The state a paused job returns to on release.', max_length=16, verbose_name='last state'),
        ),
        migrations.AlterField(
            model_name='futurejob',
            name='state',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('running', 'Running'), ('paused', 'Paused'), ('buried', 'Buried'), ('waiting', 'Waiting')], default='scheduled', max_length=16, verbose_name='state'),
        ),
        migrations.AddConstraint(
            model_name='futurejob',
            constraint=models.CheckConstraint(condition=models.Q(('state__in', ['scheduled', 'running', 'paused', 'buried', 'waiting'])), name='prescient_state_valid'),
        ),
        migrations.AddIndex(
            model_name='joblink',
            index=models.Index(fields=['child_id'], name='prescient_link_child'),
        ),
        migrations.AddConstraint(
            model_name='joblink',
            constraint=models.UniqueConstraint(fields=('parent_id', 'child_id'), name='prescient_link_unique'),
        ),
        migrations.AddConstraint(
            model_name='joblink',
            constraint=models.CheckConstraint(condition=models.Q(('parent_id', models.F('child_id')), _negated=True), name='prescient_link_not_self'),
        ),
    ]
