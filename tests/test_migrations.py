"""What the migrations leave in the database beyond the models."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

autovacuum = importlib.import_module("prescient.migrations.0010_queue_autovacuum")


@pytest.mark.postgres
def test_the_live_table__has_autovacuum_fitted_to_a_queue():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'prescient_futurejob'")
        (options,) = cursor.fetchone()
    assert sorted(options) == sorted(f"{name}={value}" for name, value in autovacuum.PARAMETERS.items())
    assert float(autovacuum.PARAMETERS["autovacuum_vacuum_scale_factor"]) < 0.2  # PostgreSQL's default


@pytest.mark.postgres
def test_the_autovacuum_migration__resets_what_it_set(transactional_db):
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("prescient", "0009_checkpoints_and_deferred_sleep")])
        with connection.cursor() as cursor:
            cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'prescient_futurejob'")
            assert cursor.fetchone()[0] is None
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate([("prescient", "0010_queue_autovacuum")])
