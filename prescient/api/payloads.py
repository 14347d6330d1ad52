"""How jobs and history rows look in the API's answers, and the cursors that page through them."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.db import models

from .. import limits
from ..clock import db_now
from ..engine.kind import get_kind
from ..exceptions import PrescientError
from ..models import FutureJob, JobHistory, JobLink
from .errors import invalid

#: The largest id a cursor may carry (a bigint).
MAX_ID = 2**63 - 1


# --- payloads ---------------------------------------------------------------------------------


Links = dict[int, tuple[list[int], list[int]]]


def links_of(job_ids: list[int]) -> Links:
    """``{job id: (parent ids, child ids)}`` of ``job_ids``, in two queries."""
    found: Links = {pk: ([], []) for pk in job_ids}
    for parent, child in JobLink.objects.filter(child_id__in=job_ids).order_by("parent_id").values_list(
        "parent_id", "child_id"
    ):
        found[child][0].append(parent)
    for parent, child in JobLink.objects.filter(parent_id__in=job_ids).order_by("child_id").values_list(
        "parent_id", "child_id"
    ):
        found[parent][1].append(child)
    return found


def task_out(job: FutureJob, links: Links | None = None, held: dict[int, str] | None = None) -> dict[str, Any]:
    parents, children = (links or links_of([job.pk]))[job.pk]
    if held is None:
        held = _held([job])
    return {
        "id": job.pk,
        "check": job.job_exec,
        "kind": job.kind,
        "ladder": _ladder(job),
        "entity": {"model": job.entity_name, "key": job.entity_key},
        "workflow": job.workflow,
        "state": job.state,
        "last_state": job.last_state or None,
        "next_check_at": job.next_check_at,
        "first_check_at": job.first_check_at,
        "created_at": job.created_at,
        "check_count": job.check_count,
        "run_count": job.run_count,
        "failure_count": job.failure_count,
        "total_run_seconds": job.total_run_seconds,
        "in_flight": job.in_flight,
        "end_requested": job.end_requested or None,
        "last_error": job.last_error,
        "held_by": held.get(job.pk),
        "parents": parents,
        "children": children,
        "rerun_of": job.rerun_of,
    }


def _held(jobs: list[FutureJob]) -> dict[int, str]:
    """Why each due job is held back by a limit or rate (nothing read when none is declared)."""
    if not limits.declared():
        return {}
    now = db_now()
    return limits.holding(jobs, now, now)


def history_out(row: JobHistory, links: Links | None = None) -> dict[str, Any]:
    parents, children = (links or links_of([row.job_id]))[row.job_id]
    return {
        "id": row.pk,
        "job_id": row.job_id,
        "check": row.job_exec,
        "kind": row.kind,
        "ladder": _ladder(row),
        "entity": {"model": row.entity_name, "key": row.entity_key},
        "workflow": row.workflow,
        "outcome": row.outcome,
        "check_count": row.check_count,
        "run_count": row.run_count,
        "failure_count": row.failure_count,
        "total_run_seconds": row.total_run_seconds,
        "first_check_at": row.first_check_at,
        "created_at": row.created_at,
        "finished_at": row.finished_at,
        "last_error": row.last_error,
        "reason": row.reason,
        "asked_check_at": row.asked_check_at,
        "parents": parents,
        "children": children,
        "rerun_of": row.rerun_of,
    }


def _ladder(row: FutureJob | JobHistory) -> dict[str, Any] | None:
    """The kind's own fields (an expectation's rungs, step and met_at); None for other kinds."""
    try:
        return get_kind(row.kind).ladder(row)
    except PrescientError:  # a kind no code registers any more
        return None


def tasks_out(jobs: list[FutureJob]) -> list[dict[str, Any]]:
    links = links_of([job.pk for job in jobs])
    held = _held(jobs)
    return [task_out(job, links, held) for job in jobs]


def histories_out(rows: list[JobHistory]) -> list[dict[str, Any]]:
    links = links_of([row.job_id for row in rows])
    return [history_out(row, links) for row in rows]


# --- pages ------------------------------------------------------------------------------------


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"id:{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The id in a cursor made by :func:`encode_cursor`; a 400 for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        kind, _, value = raw.partition(":")
        pk = int(value) if kind == "id" and value.isdigit() else -1
    except (binascii.Error, ValueError):
        pk = -1
    if not 0 <= pk <= MAX_ID:
        raise invalid("cursor", "Not a cursor from this API: pass next_cursor of the previous page.")
    return pk


def page(queryset: models.QuerySet[Any], limit: int) -> tuple[list[Any], str | None]:
    rows = list(queryset[: limit + 1])
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, encode_cursor(rows[-1].pk)
    return rows, None
