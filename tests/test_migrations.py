"""What the migrations leave in the database beyond the models."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime

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


WORKFLOW_INDEX = "prescient_hist_workflow"


def test_the_history__has_an_index_on_its_rows_of_a_workflow():
    assert history_indexes()[WORKFLOW_INDEX] == ["workflow"]


def workflow_index_per_partition():
    """Each partition of the history: whether its index attached to the workflow index is valid
    (None: it has none), and whether the parent's index is valid."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, (SELECT x.indisvalid FROM pg_inherits a JOIN pg_index x ON x.indexrelid = a.inhrelid"
            " WHERE a.inhparent = to_regclass(%s) AND x.indrelid = c.oid) FROM pg_inherits p"
            " JOIN pg_class c ON c.oid = p.inhrelid WHERE p.inhparent = 'prescient_jobhistory'::regclass",
            [WORKFLOW_INDEX],
        )
        partitions = dict(cursor.fetchall())
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [WORKFLOW_INDEX])
        row = cursor.fetchone()
    return partitions, row[0] if row else None


@pytest.mark.postgres
def test_on_postgres__the_workflow_index_is_valid_and_each_partition_has_its_own_even_one_made_after():
    from prescient.engine.store import partitions as parts

    partitions, valid = workflow_index_per_partition()
    assert valid is True
    assert len(partitions) >= 2 and set(partitions.values()) == {True}, partitions  # a month's and DEFAULT
    name = "prescient_jobhistory_p20310101"
    parts.create(name, datetime(2031, 1, 1, tzinfo=UTC), datetime(2031, 1, 2, tzinfo=UTC))
    try:
        assert workflow_index_per_partition()[0][name] is True
    finally:
        parts.drop(name)


def test_the_workflow_index_migration__drops_it_and_builds_it_again_finishing_an_interrupted_build(
    transactional_db,
):
    """On PostgreSQL, built partition by partition (none may be built ``CONCURRENTLY`` on the
    parent): a build cut short, after the parent's and one partition's were made but before that
    one was attached, is finished by running the migration again."""
    from django.db.migrations.executor import MigrationExecutor

    from prescient.engine.store import partitions as parts

    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("prescient", "0026_job_check_due_index")])
        assert WORKFLOW_INDEX not in history_indexes()
        if on_postgres():
            assert set(workflow_index_per_partition()[0].values()) == {None}
            first = parts.partitions()[0].name
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE INDEX {WORKFLOW_INDEX} ON ONLY prescient_jobhistory (workflow) "
                               "WHERE NOT workflow = ''")
                cursor.execute(f"CREATE INDEX {first}_workflow_idx ON {first} (workflow) WHERE NOT workflow = ''")
            partitions, valid = workflow_index_per_partition()
            assert valid is False and partitions[first] is None
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("prescient"))
    assert history_indexes()[WORKFLOW_INDEX] == ["workflow"]
    if on_postgres():
        partitions, valid = workflow_index_per_partition()
        assert valid is True and set(partitions.values()) == {True}, partitions
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s AND indexname LIKE %s",
                           [first, "%workflow%"])
            assert cursor.fetchone() == (1,)  # the interrupted build's, attached: not a second one


@pytest.mark.postgres
def test_the_partitioned_build__gives_up_on_a_lock_held_by_a_long_transaction_rather_than_queue_job_endings(
    transactional_db, monkeypatch
):
    """The parent's index made ``ON ONLY`` takes a lock that an ending job's insert holds: behind
    a transaction that has not committed, the migration gives up (job endings are not queued
    behind it), says to run it again, and then builds."""
    import psycopg
    from django.db import OperationalError

    concurrently = importlib.import_module("prescient.migrations._concurrently")
    monkeypatch.setattr(concurrently, "LOCK_TIMEOUT", "100ms")
    name, definition = "prescient_hist_test_lock", "(job_exec) WHERE NOT job_exec = ''"
    db = connection.settings_dict
    with psycopg.connect(dbname=db["NAME"], host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"],
                         password=db["PASSWORD"] or None) as other:
        other.execute("INSERT INTO prescient_jobhistory (job_id, entity_name, entity_key, job_exec, workflow, "
                      "outcome, check_count, run_count, failure_count, total_run_seconds, first_check_at, "
                      "created_at, finished_at, last_error, reason, errors) VALUES (1, 'testapp.thing', '1', "
                      "'test.record', '', 'completed', 0, 0, 0, 0, now(), now(), now(), '', '', '[]')")
        with connection.cursor() as cursor:  # without the lock timeout: this, not a hang
            cursor.execute("SET statement_timeout = '5s'")
        try:
            with connection.schema_editor(atomic=False) as editor, pytest.raises(OperationalError, match="run migrate"):
                concurrently.build(editor, "prescient_jobhistory", name, definition)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")
        other.rollback()
    try:
        with connection.schema_editor(atomic=False) as editor:
            concurrently.build(editor, "prescient_jobhistory", name, definition)
        with connection.cursor() as cursor:
            cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
            assert cursor.fetchone() == (True,)
    finally:
        with connection.schema_editor(atomic=False) as editor:
            concurrently.remove(editor, name)


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
