"""The wait after a database fault, shared by the worker and its children."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection

from prescient.runtime.backoff import Backoff


@pytest.mark.django_db(transaction=True)
def test_backoff__doubles_up_to_its_bound_closes_connections_and_resets(caplog):
    backoff = Backoff("worker child w/1", first=0.001, most=0.004)
    waits = []
    for _ in range(4):
        connection.ensure_connection()
        backoff.fault(OperationalError("server closed the connection"))
        waits.append(backoff.seconds)
        assert connection.connection is None  # closed: the next query opens a new one
    assert waits == [0.001, 0.002, 0.004, 0.004]
    assert "worker child w/1: database error (server closed the connection); retrying in 0.00s" in caplog.text
    backoff.reset()
    backoff.fault(OperationalError("again"))
    assert backoff.seconds == 0.001
