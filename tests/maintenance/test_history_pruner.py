"""The history pruner (prescient.maintenance.history_pruner): history past its retention."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from prescient import maintenance
from prescient.clock import db_now
from prescient.engine import store
from prescient.engine.sweep import Survey
from prescient.maintenance import history_pruner
from prescient.maintenance.history_pruner import HistoryPruner, cutoffs, prune, prune_all, retention
from prescient.models import JobHistory
from prescient.states import Outcome

pytestmark = pytest.mark.django_db

IDLE = Survey(due=False, stale=False)
SECOND = timedelta(seconds=1)


def history(outcome, finished_at, key="1"):
    return JobHistory.objects.create(
        job_id=1, entity_name="testapp.thing", entity_key=key, job_exec="test.record", outcome=outcome,
        first_check_at=finished_at, created_at=finished_at, finished_at=finished_at,
    )


def left():
    return sorted(JobHistory.objects.values_list("outcome", "entity_key"))


def test_the_default__keeps_completed_14_days_and_every_other_outcome_90(settings):
    settings.PRESCIENT = {}  # the library's default, not the test settings' (which keep all)
    assert retention() == {outcome: 14 if outcome == Outcome.COMPLETED else 90 for outcome in Outcome.values}


def test_run_once__removes_exactly_the_expired_rows_of_each_outcome(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"completed": 7, "failed": 30, "*": 60}}
    for outcome, days in (("completed", 7), ("failed", 30), ("killed", 60), ("cancelled", 60)):
        cutoff = t0 - timedelta(days=days)
        history(outcome, cutoff - SECOND, key="expired")
        history(outcome, cutoff, key="at the cut-off")  # kept: only rows finished before it expire
        history(outcome, cutoff + SECOND, key="kept")
    assert HistoryPruner().run_once(t0) == 4
    outcomes, keys = ("completed", "failed", "killed", "cancelled"), ("at the cut-off", "kept")
    assert left() == sorted((outcome, key) for outcome in outcomes for key in keys)
    assert HistoryPruner().run_once(t0) == 0


def test_run_once__an_outcome_given_none_or_absent_without_a_default_is_kept_forever(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"completed": 1, "failed": None}}
    ancient = t0 - timedelta(days=10_000)
    for outcome in ("completed", "failed", "killed"):
        history(outcome, ancient)
    assert HistoryPruner().run_once(t0) == 1
    assert left() == [("failed", "1"), ("killed", "1")]
    assert set(cutoffs(t0)) == {"completed"}


def test_run_once__none_keeps_every_row_forever(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": None}
    for outcome in Outcome.values:
        history(outcome, t0 - timedelta(days=10_000))
    assert HistoryPruner().run_once(t0) == 0
    assert JobHistory.objects.count() == len(Outcome.values)
    assert cutoffs(t0) == {}


def test_run_once__zero_days_removes_every_row_finished_before_now(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 0}}
    history("completed", t0 - SECOND, key="before")
    history("completed", t0, key="now")
    assert HistoryPruner().run_once(t0) == 1
    assert left() == [("completed", "now")]


def test_run_once__a_future_now_removes_nothing_the_database_clock_keeps(settings):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    history("completed", db_now())
    assert HistoryPruner().run_once(db_now() + timedelta(days=30)) == 0
    assert JobHistory.objects.count() == 1


def test_run_once__stops_after_its_batches_and_catches_up_at_the_next_passes(settings, t0, monkeypatch):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    monkeypatch.setattr(history_pruner, "BATCH_SIZE", 2)
    monkeypatch.setattr(history_pruner, "BATCHES_PER_RUN", 2)
    for i in range(5):
        history("completed", t0 - timedelta(days=2, minutes=i), key=f"c{i}")
    history("failed", t0 - timedelta(days=3), key="f")
    history("failed", t0, key="fresh")
    service = HistoryPruner()
    assert service.is_due(IDLE)  # due at a process's first pass: a cron tick lives for seconds
    service.last_run = time.monotonic()  # as run_due marks it when it runs it
    removed = [service.run_once(t0)]
    assert service.is_due(IDLE)  # behind: due again at the next pass
    removed.append(service.run_once(t0))
    assert service.is_due(IDLE)  # stopped at its bound again, with outcomes not yet looked at
    removed.append(service.run_once(t0))
    assert not service.is_due(IDLE)  # caught up: back to its interval
    assert removed == [4, 2, 0]
    assert left() == [("failed", "fresh")]


def test_prune__removes_the_oldest_rows_of_an_outcome_first(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    for day in (5, 2, 9, 3):
        history("completed", t0 - timedelta(days=day), key=f"{day} days ago")
    done = prune(t0, batch_size=2, max_batches=1)
    assert (done.removed, done.complete) == ({"completed": 2}, False)
    assert left() == [("completed", "2 days ago"), ("completed", "3 days ago")]


def test_run_due__runs_the_pruner_outside_a_transaction_of_its_own(transactional_db, settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    history("completed", t0 - timedelta(days=2))
    service = next(s for s in maintenance.registered_services() if s.name == "history_pruner")
    assert service.own_transactions
    service.last_run -= service.interval
    assert maintenance.run_due(t0, survey=IDLE)["history_pruner"] == 1
    assert JobHistory.objects.count() == 0


def test_run_due__inside_the_hosts_transaction_leaves_the_pruner_to_a_later_pass(settings, t0):
    """tick() called inside atomic(): the pruner's batches would all join that transaction,
    the long one they exist to avoid; it waits for a pass outside one (still due then)."""
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    history("completed", t0 - timedelta(days=2))
    service = next(s for s in maintenance.registered_services() if s.name == "history_pruner")
    service.last_run -= service.interval
    with transaction.atomic():
        assert "history_pruner" not in maintenance.run_due(t0, survey=IDLE)
    assert JobHistory.objects.count() == 1
    assert service.is_due(IDLE)


@pytest.mark.postgres
def test_exclusive_without_a_transaction__holds_a_session_lock_only_for_its_block():
    import psycopg
    from django.db import connection

    from prescient.engine import store

    settings = connection.settings_dict
    other = psycopg.connect(
        dbname=settings["NAME"], user=settings.get("USER") or "postgres", host=settings.get("HOST") or "127.0.0.1",
        port=settings.get("PORT") or 5432, autocommit=True,
    )

    def other_gets_it() -> bool:
        got = other.execute("SELECT pg_try_advisory_lock(%s, %s)", store._lock_key("test")).fetchone()[0]
        if got:
            other.execute("SELECT pg_advisory_unlock(%s, %s)", store._lock_key("test"))
        return bool(got)

    try:
        with store.exclusive("test", hold_transaction=False) as mine:
            assert mine
            assert not other_gets_it()
            with store.exclusive("test", hold_transaction=False) as again:
                assert again  # a session lock is re-entrant in its own session
        assert other_gets_it()
        other.execute("SELECT pg_advisory_lock(%s, %s)", store._lock_key("test"))
        with store.exclusive("test", hold_transaction=False) as mine:
            assert not mine  # held by another session: not waited for
    finally:
        other.close()


def test_prune__a_stopped_prune_resumes_after_the_newest_row_it_deleted(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    for day in (5, 4, 3, 2):
        history("completed", t0 - timedelta(days=day), key=f"{day} days ago")
    first = prune(t0, batch_size=2, max_batches=1)
    assert first.resume == {"completed": t0 - timedelta(days=4)}
    # A row older than where it got to is not looked at again by the resumed prune (none can
    # appear: a history row is written when its job ends, dated then).
    history("completed", t0 - timedelta(days=9), key="9 days ago")
    second = prune(t0, batch_size=2, resume=first.resume)
    assert (second.removed["completed"], second.complete) == (2, True)
    assert second.resume["completed"] == t0 - timedelta(days=2)
    assert left() == [("completed", "9 days ago")]
    assert prune(t0).removed["completed"] == 1  # a fresh prune starts from the oldest row


def test_run_once__resumes_only_while_behind(settings, t0, monkeypatch):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    monkeypatch.setattr(history_pruner, "BATCH_SIZE", 1)
    monkeypatch.setattr(history_pruner, "BATCHES_PER_RUN", 1)
    history("completed", t0 - timedelta(days=3), key="a")
    history("completed", t0 - timedelta(days=2), key="b")
    service = HistoryPruner()
    assert service.run_once(t0) == 1 and service.behind
    assert service.resume == {"completed": t0 - timedelta(days=3)}
    assert service.run_once(t0) == 1 and service.behind  # its bound again: perhaps more left
    assert service.run_once(t0) == 0 and not service.behind
    history("completed", t0 - timedelta(days=30), key="late")  # e.g. a restored backup
    assert service.run_once(t0) == 1  # caught up: the next pass starts from the oldest row
    assert left() == []


def test_a_tick_from_cron__prunes_in_its_one_pass(transactional_db, t0):
    """A prescient_tick process lives for seconds: the pruner runs at its first pass, not only
    after ten minutes (which a tick never lives to see)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT, database_env

    history("completed", t0 - timedelta(days=2), key="expired")
    history("completed", t0, key="kept")
    env = database_env()
    env["PRESCIENT_TEST_SETTINGS"] = json.dumps({"HISTORY_RETENTION_DAYS": {"*": 1}})
    subprocess.run(
        [sys.executable, "-m", "django", "prescient_tick", "--now", t0.isoformat(), "-v", "0",
         "--settings=tests.settings"],
        cwd=ROOT, env=env, check=True, timeout=120,
    )
    assert left() == [("completed", "kept")]


def test_is_due__never_when_all_history_is_kept(settings):
    """With every outcome kept forever the duty is never due: an idle tick stays one query."""
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": None}
    service = HistoryPruner()
    assert not service.is_due(IDLE)
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"failed": 30}}
    assert service.is_due(IDLE)


# --- the command and the duty: one lock -----------------------------------------------------------


def many_expired(count, t0):
    rows = [
        JobHistory(
            job_id=i, entity_name="testapp.thing", entity_key=str(i), job_exec="test.record", outcome="completed",
            first_check_at=t0, created_at=t0, finished_at=t0 - timedelta(days=2, seconds=i),
        )
        for i in range(count)
    ]
    JobHistory.objects.bulk_create(rows, batch_size=2000)


@pytest.mark.postgres
def test_prescient_prune__beside_two_upkeep_threads_pruning_every_pass__leaves_no_expired_row(
    transactional_db, settings, t0, monkeypatch
):
    """Two threads, each with its own connection, run the upkeep as a worker does, the history
    pruner due at every pass (small batches, so that the command's batches meet theirs). The
    command exits with no expired row left, three times in a row: it waits for a pass in
    progress, and the duty skips its passes while the command holds the lock."""
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    monkeypatch.setattr(HistoryPruner, "interval", 0.0)
    monkeypatch.setattr(history_pruner, "BATCH_SIZE", 100)
    monkeypatch.setattr(history_pruner, "BATCHES_PER_RUN", 5)
    stop, failures, pruned = threading.Event(), [], []

    def upkeep():
        try:
            while not stop.is_set():
                pruned.append(maintenance.run_due(t0, survey=IDLE).get("history_pruner", 0))
        except Exception as exc:  # reported by the test
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=upkeep) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):
            many_expired(3000, t0)
            # Once, let the threads take a pass first: on a loaded machine the command could
            # otherwise win every race, and the duties' share would be left to chance.
            deadline = time.monotonic() + 10
            while not sum(pruned) and time.monotonic() < deadline:
                time.sleep(0.01)
            out = StringIO()
            call_command("prescient_prune", "--now", t0.isoformat(), "--batch-size", "100", stdout=out)
            assert JobHistory.objects.count() == 0, out.getvalue()
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert failures == []
    assert sum(pruned) > 0, "the upkeep threads pruned too"


@pytest.mark.postgres
def test_prune_all__waits_for_a_pass_in_progress_and_the_duty_skips_while_it_runs(transactional_db, settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    history("completed", t0 - timedelta(days=2))
    holding, release, finished = threading.Event(), threading.Event(), threading.Event()

    def a_pass_in_progress():
        try:
            with store.exclusive(maintenance.lock_name("history_pruner"), hold_transaction=False) as mine:
                assert mine
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    def command():
        try:
            prune_all(t0)
            finished.set()
        finally:
            connection.close()

    passing = threading.Thread(target=a_pass_in_progress)
    passing.start()
    assert holding.wait(10)
    pruning = threading.Thread(target=command)
    pruning.start()
    assert not finished.wait(0.5), "the command did not wait for the pass in progress"
    release.set()
    passing.join(10)
    pruning.join(10)
    assert finished.is_set() and JobHistory.objects.count() == 0
    # And the other way round: while the command holds the lock, a worker's pass skips the duty.
    service = next(s for s in maintenance.registered_services() if s.name == "history_pruner")
    service.last_run -= service.interval
    history("completed", t0 - timedelta(days=2))
    ran: list[dict[str, int]] = []

    def worker_pass():
        try:
            ran.append(maintenance.run_due(t0, survey=IDLE))
        finally:
            connection.close()

    with store.exclusive(maintenance.lock_name("history_pruner"), hold_transaction=False, wait=True):
        other = threading.Thread(target=worker_pass)
        other.start()
        other.join(10)
    assert len(ran) == 1 and "history_pruner" not in ran[0]
    assert JobHistory.objects.count() == 1
