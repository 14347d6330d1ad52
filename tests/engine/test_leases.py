"""Lease renewal (store.renew_leases): the claims of a token, or of every token under a worker's
prefix, stamped alive; on PostgreSQL never waiting for a row another transaction holds (issue
#32, item 6; the fault test with real processes is tests/faults/test_leases.py)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from prescient.clock import db_now
from prescient.engine import store
from prescient.models import FutureJob
from prescient.states import State


def claimed(make_job, token: str, at) -> FutureJob:
    return make_job(state=State.RUNNING, reserved_by=token, reserved_at=at)


@pytest.mark.django_db
def test_renew_leases__a_prefix_stamps_every_claim_under_it_and_nothing_else(make_job):
    old = db_now() - timedelta(hours=1)
    mine = [claimed(make_job, "worker:h:1:a/1/1", old), claimed(make_job, "worker:h:1:a/2/7", old)]
    others = [claimed(make_job, "worker:h:1:ab/1/1", old), claimed(make_job, "worker:h_1:a/1/1", old)]
    assert store.renew_leases("worker:h:1:a/", prefix=True) == 2
    fresh = db_now() - timedelta(minutes=1)
    assert all(FutureJob.objects.get(pk=job.pk).reserved_at > fresh for job in mine)
    assert all(FutureJob.objects.get(pk=job.pk).reserved_at == old for job in others)  # "_" is no wildcard


@pytest.mark.django_db
def test_renew_leases__a_token_stamps_its_own_claim(make_job):
    old = db_now() - timedelta(hours=1)
    job = claimed(make_job, "tick:h:1:x", old)
    other = claimed(make_job, "tick:h:1:xy", old)
    assert store.renew_leases("tick:h:1:x") == 1
    assert FutureJob.objects.get(pk=job.pk).reserved_at > old
    assert FutureJob.objects.get(pk=other.pk).reserved_at == old


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_renew_leases__skips_a_row_another_transaction_holds_without_waiting(make_job):
    """A settle holding one of the rows does not make the heartbeat wait (and so it can never be
    one half of a deadlock); that row is left for the settle, the others are stamped."""
    old = db_now() - timedelta(hours=1)
    jobs = [claimed(make_job, f"worker:h:1:a/1/{n}", old) for n in range(5)]
    held, locked, release = jobs[2], threading.Event(), threading.Event()

    def settle_in_progress() -> None:
        try:
            with transaction.atomic():
                FutureJob.objects.select_for_update().get(pk=held.pk)
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=settle_in_progress)
    thread.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        assert store.renew_leases("worker:h:1:a/", prefix=True) == 4
        assert time.monotonic() - started < 5
    finally:
        release.set()
        thread.join(30)
    assert FutureJob.objects.get(pk=held.pk).reserved_at == old
    assert FutureJob.objects.exclude(pk=held.pk).filter(reserved_at=old).count() == 0
