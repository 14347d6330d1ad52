"""The worker pruner (prescient.maintenance.worker_pruner): rows of long-stopped workers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from prescient.maintenance.worker_pruner import KEEP_STOPPED, WorkerPruner
from prescient.models import Worker

pytestmark = pytest.mark.django_db


def worker(name, t0, heartbeat_at=None, **fields):
    return Worker.objects.create(
        name=name, hostname="h", pid=1, started_at=t0, heartbeat_at=heartbeat_at or t0, **fields
    )


def test_run_once__deletes_workers_stopped_or_silent_longer_than_kept(t0):
    worker("old", t0 - KEEP_STOPPED * 2, stopped_at=t0 - KEEP_STOPPED - timedelta(seconds=1))
    worker("recent", t0 - KEEP_STOPPED, stopped_at=t0 - KEEP_STOPPED + timedelta(hours=1))
    worker("running", t0 - KEEP_STOPPED * 3, heartbeat_at=t0)  # never stopped, however old, still beating
    worker("killed", t0 - KEEP_STOPPED * 3)  # never said it stopped; silent for three weeks
    assert WorkerPruner().run_once(t0) == 2
    assert sorted(Worker.objects.values_list("name", flat=True)) == ["recent", "running"]


def test_run_once__a_future_now_prunes_no_live_worker(t0):
    from prescient.clock import db_now

    worker("live", db_now())
    assert WorkerPruner().run_once(db_now() + KEEP_STOPPED * 10) == 0


def test_run_once__nothing_to_prune(t0):
    assert WorkerPruner().run_once(t0) == 0
