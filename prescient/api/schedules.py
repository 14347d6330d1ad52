"""The JSON API's recurring schedules: create (or update), list, get, pause, resume and delete.

Check schedules only, as for jobs: a schedule starts a registered check on an instance of the
check's own model, looked up as ``POST jobs`` looks it up. Task schedules (declared in code
with ``@prescient.periodic``) are listed, read, paused and resumed, never created here. Each
endpoint needs a permission of the ``Schedule`` model; a scoped token sees and steers only the
schedules of its checks. Every change goes through :mod:`prescient.engine.recurring`.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Status
from ninja.params import functions as params

from .. import cron
from ..conf import setting
from ..engine import recurring
from ..exceptions import InvalidSchedule, closest, did_you_mean
from ..models import Schedule
from ..schedules import check_spec
from .auth import ADD_SCHEDULE, CHANGE_SCHEDULE, DELETE_SCHEDULE, VIEW_SCHEDULE, Principal, caller, needs
from .errors import ApiError, forbidden, invalid, not_found
from .payloads import decode_cursor, page
from .schemas import ScheduleDetail, ScheduleFilters, ScheduleIn, SchedulePage, Text
from .views import _by_entity, _entity, _errors, _registered, _scoped, api

logger = logging.getLogger(__name__)

#: How many of its next occurrences ``GET schedules/{name}`` shows (as the admin does).
UPCOMING = 5


def schedule_out(row: Schedule, *, upcoming: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": row.name,
        "kind": row.kind,
        "check": row.job_exec,
        "entity": {"model": row.entity_name, "key": row.entity_key} if row.entity_key else None,
        "cron": row.cron or None,
        "every_seconds": row.every_seconds,
        "timezone": row.timezone,
        "when": cron.in_words(row.cron, row.every_seconds, row.timezone),
        "catch_up": row.catch_up,
        "workflow": row.workflow,
        "next_at": row.next_at,
        "due_at": row.due_at,
        "paused": row.is_paused,
        "paused_at": row.paused_at,
        "declared": row.declared,
        "runs": row.runs,
        "skipped": row.skipped,
        "missed": row.missed,
        "last_run_at": row.last_run_at,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    if upcoming:
        out["upcoming"] = recurring.upcoming(row, UPCOMING)
    return out


def _schedule(principal: Principal, name: str) -> Schedule:
    """The schedule ``name`` if the caller may see it; a 404 otherwise (out of scope included)."""
    row = _scoped(Schedule.objects.filter(name=name), principal).first()
    if row is None:
        known = _scoped(Schedule.objects.all(), principal).values_list("name", flat=True)[:10_000]
        raise not_found(f"There is no schedule named {name!r}.{did_you_mean(closest(name, known))}")
    return row


def _fresh(name: str) -> Schedule:
    row = Schedule.objects.filter(name=name).first()
    if row is None:
        raise not_found(f"Schedule {name!r} was deleted meanwhile.")
    return row


def _timing(payload: ScheduleIn) -> dict[str, Any]:
    """The schedule's timing, each field checked on its own so that an error names its field."""
    if (payload.cron is None) == (payload.every_seconds is None):
        message = "Give either cron (an expression) or every_seconds (an interval), not both or neither."
        raise ApiError(400, "The request is not valid.", {"cron": [message], "every_seconds": [message]})
    try:
        expression = cron.validate(payload.cron) if payload.cron is not None else ""
    except InvalidSchedule as exc:
        raise invalid("cron", str(exc)) from None
    every = None
    if payload.every_seconds is not None:
        slot_seconds = int(setting("SLOT_MINUTES")) * 60
        if payload.every_seconds < slot_seconds:
            raise invalid("every_seconds", f"The interval is under one slot ({slot_seconds} seconds).")
        every = timedelta(seconds=payload.every_seconds)
    try:
        cron.zone(payload.timezone)
    except InvalidSchedule as exc:
        raise invalid("timezone", str(exc)) from None
    if payload.catch_up == "all":
        raise invalid(
            "catch_up", "catch_up 'all' is for task schedules; a check has one pending job per entity, so use "
            "'latest' or 'skip'."
        )
    return {"cron": expression, "every": every, "timezone": payload.timezone, "catch_up": payload.catch_up,
            "workflow": payload.workflow}


@api.post(
    "schedules",
    auth=needs(ADD_SCHEDULE),
    response={200: ScheduleDetail, 201: ScheduleDetail, **_errors(400, 401, 403, 409, 503)},
    tags=["schedules"],
    operation_id="create_schedule",
    summary="Create or update a recurring schedule of a check",
)
def create_schedule(request: HttpRequest, payload: ScheduleIn) -> Any:
    """201 with the new schedule; 200 when a schedule of that name existed and was updated (its
    counters and pause kept, its next occurrence the first after now), which needs the change
    permission too. A schedule declared in code cannot be changed here (409)."""
    principal = caller(request)
    if not principal.allows(payload.check):
        raise forbidden(f"This token may not act on the check {payload.check!r}.", field="check")
    existing = Schedule.objects.filter(name=payload.name).first()
    if existing is not None:
        principal.require(CHANGE_SCHEDULE)
        if not principal.allows(existing.job_exec):
            raise forbidden(f"This token may not act on the schedule {payload.name!r}.", field="name")
        if existing.declared:
            raise ApiError(409, f"The schedule {payload.name!r} is declared in code (@prescient.periodic); change "
                                "its declaration.")
    check = _registered(payload.check, principal)
    instance = _entity(check, payload.entity.model, payload.entity.key)
    timing = _timing(payload)
    try:
        spec = check_spec(payload.name, check, instance, **timing)
        row = recurring.save(spec, now=timezone.now())
    except InvalidSchedule as exc:
        raise ApiError(400, "The request is not valid.", {"body": [str(exc)]}) from None
    created = existing is None
    logger.info("api: schedule %s %s check=%s by user=%s", row.name, "created" if created else "updated",
                check.name, principal.user.pk)
    return Status(201 if created else 200, schedule_out(row, upcoming=True))


@api.get(
    "schedules",
    auth=needs(VIEW_SCHEDULE),
    response={200: SchedulePage, **_errors(400, 401, 403, 503)},
    tags=["schedules"],
    operation_id="list_schedules",
    summary="List recurring schedules",
)
def list_schedules(request: HttpRequest, filters: Query[ScheduleFilters]) -> Any:
    """Schedules, oldest first (by id), a page at a time: pass ``next_cursor`` as ``cursor``."""
    queryset = _scoped(Schedule.objects.all(), caller(request))
    if filters.check is not None:
        queryset = queryset.filter(job_exec=filters.check)
    if filters.entity:
        queryset = _by_entity(queryset, filters.entity)
    if filters.paused is not None:
        queryset = queryset.filter(paused_at__isnull=not filters.paused)
    if filters.cursor:
        queryset = queryset.filter(pk__gt=decode_cursor(filters.cursor))
    rows, next_cursor = page(queryset.order_by("pk"), filters.limit)
    return {"items": [schedule_out(row) for row in rows], "next_cursor": next_cursor}


@api.get(
    "schedules/{name}",
    auth=needs(VIEW_SCHEDULE),
    response={200: ScheduleDetail, **_errors(400, 401, 403, 404, 503)},
    tags=["schedules"],
    operation_id="get_schedule",
    summary="One recurring schedule, with its next occurrences",
)
def get_schedule(request: HttpRequest, name: Text = params.Path(..., max_length=200)) -> Any:
    return schedule_out(_schedule(caller(request), name), upcoming=True)


@api.post(
    "schedules/{name}/pause",
    auth=needs(CHANGE_SCHEDULE),
    response={200: ScheduleDetail, **_errors(400, 401, 403, 404, 503)},
    tags=["schedules"],
    operation_id="pause_schedule",
    summary="Pause a schedule",
)
def pause_schedule(request: HttpRequest, name: Text = params.Path(..., max_length=200)) -> Any:
    """It produces nothing, and counts nothing as missed, until resumed. Pausing a paused
    schedule changes nothing. Jobs it already produced are not paused."""
    principal = caller(request)
    row = _schedule(principal, name)
    if recurring.pause(row.name, now=timezone.now()):
        logger.info("api: schedule %s paused by user=%s", row.name, principal.user.pk)
    return schedule_out(_fresh(row.name), upcoming=True)


@api.post(
    "schedules/{name}/resume",
    auth=needs(CHANGE_SCHEDULE),
    response={200: ScheduleDetail, **_errors(400, 401, 403, 404, 503)},
    tags=["schedules"],
    operation_id="resume_schedule",
    summary="Resume a paused schedule",
)
def resume_schedule(request: HttpRequest, name: Text = params.Path(..., max_length=200)) -> Any:
    """It starts again from its first occurrence after now (those while paused are neither run
    nor counted). Resuming a schedule that is not paused changes nothing."""
    principal = caller(request)
    row = _schedule(principal, name)
    if recurring.resume(row.name, now=timezone.now()):
        logger.info("api: schedule %s resumed by user=%s", row.name, principal.user.pk)
    return schedule_out(_fresh(row.name), upcoming=True)


@api.delete(
    "schedules/{name}",
    auth=needs(DELETE_SCHEDULE),
    response={204: None, **_errors(400, 401, 403, 404, 409, 503)},
    tags=["schedules"],
    operation_id="delete_schedule",
    summary="Delete a schedule",
)
def delete_schedule(request: HttpRequest, name: Text = params.Path(..., max_length=200)) -> Any:
    """204 when deleted. Jobs it already produced stay. A schedule declared in code would come
    back at the next sync: 409, remove its declaration instead."""
    principal = caller(request)
    row = _schedule(principal, name)
    if row.declared:
        raise ApiError(409, f"The schedule {name!r} is declared in code (@prescient.periodic); remove its "
                            "declaration.")
    if not recurring.stop(row.name):
        raise not_found(f"Schedule {name!r} was deleted meanwhile.")
    logger.info("api: schedule %s deleted by user=%s", row.name, principal.user.pk)
    return Status(204, None)
