"""The signals of jobs that end (:mod:`prescient.signals`), sent after the commit that wrote
their history rows: never for a transaction rolled back, and nothing at all (not even a
callback registered) when no receiver listens."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import apps
from django.db import transaction

from prescient.clock import from_iso
from prescient.models import JobHistory
from prescient.signals import expectation_met, job_ended
from prescient.states import Outcome

logger = logging.getLogger("prescient.engine")

#: The kind of an expectation's jobs (prescient.expectations.KIND; the store does not import kinds).
EXPECTATION = "expectation"


def announce(rows: list[JobHistory]) -> None:
    """Send ``job_ended`` for each of ``rows``, and ``expectation_met`` for the met ones, once
    the caller's transaction commits."""
    ended = job_ended.has_listeners(JobHistory)
    met = [row for row in rows if row.kind == EXPECTATION and row.outcome == Outcome.MET]
    if not (ended or (met and expectation_met.has_listeners())):
        return
    transaction.on_commit(lambda: _send(list(rows) if ended else [], met))


def _send(ended: list[JobHistory], met: list[JobHistory]) -> None:
    for row in ended:
        _log(job_ended.send_robust(JobHistory, history=row, kind=row.kind, outcome=row.outcome), row)
    for row in met:
        payload = row.payload if isinstance(row.payload, dict) else {}
        _log(expectation_met.send_robust(
            _model(row.entity_name), name=row.job_exec, entity_key=row.entity_key, history=row,
            met_at=from_iso(payload.get("met_at")) or row.finished_at,
        ), row)


def _model(label: str) -> Any:
    try:
        return apps.get_model(label)
    except (LookupError, ValueError):
        return None



def _log(results: list[tuple[Any, Any]], row: JobHistory) -> None:
    for receiver, result in results:
        if isinstance(result, Exception):
            logger.error("a receiver of job id=%s's end (%s) raised: %r", row.job_id, receiver, result,
                         exc_info=(type(result), result, result.__traceback__))
