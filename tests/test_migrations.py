"""What the migrations leave in the database beyond the models."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from tests.conftest import on_postgres

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
        executor.migrate(executor.loader.graph.leaf_nodes("prescient"))


def history_indexes():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "prescient_jobhistory")
    return {name: c["columns"] for name, c in constraints.items() if c["index"]}


def test_the_history_table__has_the_pruners_index_on_outcome_then_finished_at():
    assert history_indexes()["prescient_hist_outcome"] == ["outcome", "finished_at"]


def test_the_history_index_migration__drops_and_builds_it_again(transactional_db):
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("prescient", "0010_queue_autovacuum")])
        assert "prescient_hist_outcome" not in history_indexes()
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("prescient"))
    assert history_indexes()["prescient_hist_outcome"] == ["outcome", "finished_at"]


@pytest.mark.postgres
def test_the_history_index__is_valid():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            ["prescient_hist_outcome"],
        )
        assert cursor.fetchone() == (True,)


def test_the_dependants_migration__marks_the_live_parents_of_existing_links(transactional_db):
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("prescient", "0016_expectations")])
        apps = executor.loader.project_state([("prescient", "0016_expectations")]).apps
        job, link = apps.get_model("prescient", "FutureJob"), apps.get_model("prescient", "JobLink")
        when = "2026-11-22T10:00:00Z"
        common = {"entity_name": "testapp.thing", "job_exec": "test.record", "first_check_at": when,
                  "next_check_at": when, "created_at": when}
        parent, alone, child = (job.objects.create(entity_key=key, **common).pk for key in ("1", "2", "3"))
        link.objects.create(parent_id=parent, child_id=child, created_at=when)
        link.objects.create(parent_id=999_999, child_id=child, created_at=when)  # a parent already ended
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("prescient"))
    from prescient.models import FutureJob

    assert dict(FutureJob.objects.values_list("pk", "has_dependants")) == {parent: True, alone: False, child: False}


def index_columns(table):
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return {name: c["columns"] for name, c in constraints.items() if c["index"]}


SURVEY_INDEXES = {
    "prescient_job_due": ("prescient_futurejob", ["next_check_at", "id"], "state"),
    "prescient_job_in_flight": ("prescient_futurejob", ["reserved_at"], "reserved_by"),
    "prescient_schedule_due": ("prescient_schedule", ["due_at", "id"], "paused_at"),
}


def survey_index_columns():
    return {name: index_columns(table)[name] for name, (table, _, _) in SURVEY_INDEXES.items()}


@pytest.mark.skipif(on_postgres(), reason="SQLite only")
def test_on_sqlite__the_surveys_indexes_cover_their_conditions_column():
    assert survey_index_columns() == {name: [*cols, added] for name, (_, cols, added) in SURVEY_INDEXES.items()}


def test_the_covering_migration__builds_the_models_indexes_again_when_reversed(transactional_db):
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("prescient", "0016_expectations")])
        assert survey_index_columns() == {name: cols for name, (_, cols, _) in SURVEY_INDEXES.items()}
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("prescient"))
    covered = connection.vendor == "sqlite"
    assert survey_index_columns() == {
        name: [*cols, added] if covered else cols for name, (_, cols, added) in SURVEY_INDEXES.items()
    }
