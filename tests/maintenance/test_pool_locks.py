"""The upkeep's advisory locks behind a pooler in transaction mode (docs/operations.md, "PgBouncer").

The history pruner and ``prescient_prune`` take a transaction-level lock in each batch's
transaction, never a session lock a pooler could keep on one of its server connections; the
session lock left (``live_vacuum``: ``VACUUM`` cannot run in a transaction) has its unlock
checked. No pooler here: a lock "left on another server connection" is simulated by unlocking
it beforehand on the same session, which is what the unlock then sees.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from django.db import connection

from prescient import maintenance
from prescient.engine import store
from prescient.engine.sweep import Survey
from prescient.maintenance import history_pruner
from prescient.maintenance.history_pruner import HistoryPruner, prune, prune_all
from prescient.models import JobHistory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

IDLE = Survey(due=False, stale=False)
PRUNER_LOCK = maintenance.lock_name(HistoryPruner.name)


def expired_rows(count, t0):
    JobHistory.objects.bulk_create([
        JobHistory(
            job_id=i, entity_name="testapp.thing", entity_key=str(i), job_exec="test.record", outcome="completed",
            first_check_at=t0, created_at=t0, finished_at=t0 - timedelta(days=2, seconds=i),
        )
        for i in range(count)
    ])


def holders(name: str) -> list[tuple[int, bool]]:
    """``(pid, granted)`` of every session holding or waiting for the advisory lock ``name`` in
    this database (a two-key lock: classid, objid as an oid, objsubid 2; other databases of a
    shared cluster have pruners of their own), read on a connection of its own."""
    import psycopg

    key1, key2 = store._lock_key(name)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(autocommit=True, **params) as other:
        rows = other.execute(
            "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s "
            "AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [key1, key2 & 0xFFFFFFFF],
        ).fetchall()
    return [(int(pid), bool(granted)) for pid, granted in rows]


def in_thread(target):
    """Run ``target`` in a thread with its own connection; its result (or what it raised)."""
    out: dict[str, object] = {}

    def run():
        try:
            out["result"] = target()
        except BaseException as exc:  # reported by the caller
            out["raised"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    return out


@pytest.fixture
def pruning(settings):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}


def test_a_batch__holds_the_lock_in_its_own_transaction_and_leaves_none_behind(pruning, t0, monkeypatch):
    expired_rows(5, t0)
    seen = []
    real = store.prune_history

    def batch(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        seen.append((connection.in_atomic_block, holders(PRUNER_LOCK), pid))
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "prune_history", batch)
    monkeypatch.setattr(history_pruner, "BATCH_SIZE", 2)
    assert HistoryPruner().run_once(t0) == 5
    assert len(seen) >= 3  # completed: 2, 2, then 1 (short, so done); one (empty) batch per other outcome
    for in_transaction, held, pid in seen:
        assert in_transaction and held == [(pid, True)]
    assert holders(PRUNER_LOCK) == []  # the commit released it: no session lock to forget
    assert not connection.in_atomic_block


def test_prune_all_and_run_due__leave_no_lock_held(pruning, t0):
    expired_rows(3, t0)
    assert prune_all(t0, batch_size=2).total == 3
    assert holders(PRUNER_LOCK) == []
    expired_rows(3, t0)
    service = maintenance._services[HistoryPruner.name]
    service.last_run -= service.interval
    assert maintenance.run_due(t0, survey=IDLE).get(HistoryPruner.name) == 3
    assert holders(PRUNER_LOCK) == []


def test_two_connections__never_prune_at_once(pruning, t0, monkeypatch):
    """While one connection is in a batch, a duty on another does nothing (Busy, so run_due
    leaves it out), and the command on another waits for that batch's commit: it is seen waiting
    in pg_locks, then prunes what is left once the batch is over."""
    expired_rows(6, t0)
    real = store.prune_history
    during: dict[str, object] = {}

    def batch(*args, **kwargs):
        if not during:
            during["duty"] = in_thread(lambda: maintenance.run_due(t0, survey=IDLE))
            during["prune"] = in_thread(lambda: prune(t0, lock=PRUNER_LOCK))
            during["left"] = JobHistory.objects.count()
            command = threading.Thread(target=lambda: during.update(command=in_thread(lambda: prune_all(t0))))
            command.start()
            during["command_thread"] = command
            # The command waits for this batch's lock (deterministic: read in pg_locks, not timed).
            for _ in range(6000):
                if any(not granted for _, granted in holders(PRUNER_LOCK)):
                    break
                threading.Event().wait(0.01)
            during["waiting"] = [granted for _, granted in holders(PRUNER_LOCK)]
            during["left while waiting"] = JobHistory.objects.count()
        return real(*args, **kwargs)

    service = maintenance._services[HistoryPruner.name]
    service.last_run -= service.interval
    monkeypatch.setattr(store, "prune_history", batch)
    monkeypatch.setattr(history_pruner, "BATCH_SIZE", 2)
    monkeypatch.setattr(history_pruner, "BATCHES_PER_RUN", 1)
    done = prune(t0, max_batches=1, lock=PRUNER_LOCK)
    assert done.total == 2
    during["command_thread"].join(60)  # type: ignore[attr-defined]
    assert HistoryPruner.name not in during["duty"]["result"], "the duty ran beside a batch in progress"  # type: ignore[index]
    assert isinstance(during["prune"]["raised"], maintenance.Busy)  # type: ignore[index]
    assert during["left"] == 6 and during["left while waiting"] == 6
    assert sorted(during["waiting"]) == [False, True]  # type: ignore[arg-type]
    assert during["command"]["result"].total == 4  # type: ignore[index]
    assert JobHistory.objects.count() == 0
    assert holders(PRUNER_LOCK) == []


def test_a_duty_that_yields_mid_pass__is_not_behind(pruning, t0, monkeypatch):
    """A pass that finds the lock taken after some batches stops there; the other process
    prunes on, so the next pass is not hurried (not ``behind``)."""
    expired_rows(6, t0)
    real = store.prune_history
    calls = []
    taken = threading.Event()
    release = threading.Event()
    original = store.exclusive

    def hold():
        with original(PRUNER_LOCK, hold_transaction=False, wait=True):
            taken.set()
            release.wait(60)

    holder = threading.Thread(target=lambda: in_thread(hold))

    def batch(*args, **kwargs):
        calls.append(1)
        result = real(*args, **kwargs)
        if len(calls) == 1:
            holder.start()  # waits for this batch's commit, then holds the lock
        return result

    monkeypatch.setattr(store, "prune_history", batch)
    monkeypatch.setattr(history_pruner, "BATCH_SIZE", 2)
    service = HistoryPruner()
    try:

        def exclusive(name, **kwargs):
            if calls:
                assert taken.wait(60)
            return original(name, **kwargs)

        monkeypatch.setattr(store, "exclusive", exclusive)
        assert service.run_once(t0) == 2
    finally:
        release.set()
        holder.join(60)
    assert len(calls) == 1 and not service.behind
    assert JobHistory.objects.count() == 4


def test_a_session_lock_released_elsewhere__is_logged_and_its_connection_closed(caplog):
    """The unlock answers False (the lock was not this session's: a pooler sent the unlock to
    another server connection; simulated by unlocking first): a warning names the pooler, and the
    connection is closed, so a lock still held by this session would go with it."""
    with caplog.at_level(logging.WARNING, logger="prescient.engine"), \
            store.exclusive("test:pool", hold_transaction=False) as mine:
        assert mine and [granted for _, granted in holders("test:pool")] == [True]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", store._lock_key("test:pool"))
        assert connection.connection is not None
    assert connection.connection is None, "the connection was not closed"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "pooler" in warnings[0] and "test:pool" in warnings[0]
    assert holders("test:pool") == []
    with connection.cursor() as cursor:  # the next query opens a new connection
        cursor.execute("SELECT 1")


def test_a_session_lock_released__logs_nothing_and_keeps_the_connection(caplog):
    with caplog.at_level(logging.WARNING, logger="prescient.engine"), \
            store.exclusive("test:pool", hold_transaction=False) as mine:
        assert mine
        raw = connection.connection
    assert connection.connection is raw and raw is not None
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert holders("test:pool") == []
