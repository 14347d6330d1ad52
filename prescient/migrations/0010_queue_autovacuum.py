"""Autovacuum fitted to a queue (PostgreSQL only).

The live table is small and hot: every job is inserted, updated a few times and deleted, so dead
rows pile up far faster than PostgreSQL's defaults (vacuum after 20% of the table has changed)
expect, and the due index bloats with them. As the guides of queue libraries advise (Oban,
pgqueuer), the live table is vacuumed after 1% of it (plus 1,000 rows) has changed, analysed
after 2%, and allowed to vacuum faster. Only storage parameters change: no row is rewritten, and
``migrate prescient 0009`` resets them.
"""

from django.db import migrations

TABLE = "prescient_futurejob"
PARAMETERS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_cost_limit": "2000",
}


def fit(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    settings = ", ".join(f"{name} = {value}" for name, value in PARAMETERS.items())
    schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(TABLE)} SET ({settings})")


def unfit(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(TABLE)} RESET ({', '.join(PARAMETERS)})")


class Migration(migrations.Migration):
    dependencies = [("prescient", "0009_checkpoints_and_deferred_sleep")]

    operations = [migrations.RunPython(fit, unfit, elidable=False)]
