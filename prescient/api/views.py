"""The endpoints of the JSON API, and the OpenAPI document generated from them.

Small views over the verbs of :mod:`prescient.engine.verbs`: parse (the schemas), authorise (the
auth classes), call one verb, answer with a flat payload. Every failure an input can cause is
answered with the error shape of :mod:`.errors`, never with a 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, DataError, connection, models, transaction
from django.http import HttpRequest
from django.utils import timezone
from ninja import NinjaAPI, Query, Status
from ninja.params import functions as params
from ninja.parser import Parser

from .. import __version__
from ..checks import Check, schedulable
from ..conf import setting, stale_after_seconds
from ..engine import verbs, workflows
from ..exceptions import (
    InvalidDependency,
    InvalidTime,
    UnknownCheck,
    UnknownParent,
    WrongKind,
    closest,
    did_you_mean,
)
from ..models import FutureJob, JobHistory, Worker
from ..queries import history_with_error, history_with_exception
from ..states import State
from ..wording import parse_entity
from . import errors
from .auth import ADD, CHANGE, VIEW, VIEW_HISTORY, Principal, caller, needs
from .errors import ApiError, BodyError, forbidden, invalid, not_found
from .payloads import MAX_ID, decode_cursor, histories_out, page, task_out, tasks_out
from .schemas import (
    Error,
    Health,
    HistoryFilters,
    HistoryPage,
    Task,
    TaskFilters,
    TaskIn,
    TaskPage,
    Text,
    WorkflowOut,
)

EARLIEST = timedelta(days=1)  #: how far in the past an ``at`` may lie (late, not jumping the queue)
logger = logging.getLogger(__name__)

#: Larger request bodies are refused (a job's payload is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024

DESCRIPTION = """\
Create and steer prescient's future checks over HTTP.

**Authentication**: `Authorization: Bearer <token>` with an API token created in the admin, or
the Django session of a logged-in user (POST requests then need the `X-CSRFToken` header).
Each endpoint needs a Django permission of the user; a token acts only on the checks it is
scoped to.

**Errors** all have one shape: `{"status", "code", "message", "fields"}`, where `fields` maps a
field name to its messages.

**Times** are ISO 8601 with a UTC offset; answers give them in UTC.
"""


class JsonParser(Parser):
    """ninja's JSON parser, with a size limit and a reason when the body cannot be read."""

    def parse_body(self, request: HttpRequest) -> Any:
        body = request.body
        if len(body) > MAX_BODY_BYTES:
            raise BodyError(f"The body is too large: at most {MAX_BODY_BYTES} bytes.")
        try:
            return json.loads(body)
        except RecursionError:
            raise BodyError("The JSON is nested too deeply.") from None
        except ValueError:  # includes UnicodeDecodeError
            raise BodyError("The body is not valid JSON.") from None


api = NinjaAPI(
    title="prescient",
    version=__version__,
    description=DESCRIPTION,
    urls_namespace="prescient-api",
    openapi_url="openapi.json",
    docs_url="docs",
    parser=JsonParser(),
)
errors.install(api)


def _errors(*codes: int) -> dict[Any, Any]:
    return {codes: Error}


_M = TypeVar("_M", bound=models.Model)
_V = TypeVar("_V", bound=Callable[..., Any])


def _scoped(queryset: models.QuerySet[_M], principal: Principal) -> models.QuerySet[_M]:
    scope = principal.scope()
    return queryset if scope is None else queryset.filter(job_exec__in=scope)


def _by_entity(queryset: models.QuerySet[Any], entity: str) -> models.QuerySet[Any]:
    """``shop.order:4`` (or ``shop.order#4``): that entity's rows; ``shop.order``: its model's."""
    parsed = parse_entity(entity)
    if parsed is not None:
        return queryset.filter(entity_name=parsed[0], entity_key=parsed[1])
    return queryset.filter(entity_name=entity.strip().lower())


def _job(principal: Principal, job_id: int) -> FutureJob:
    """The live job ``job_id`` if the caller may see it; a 404 otherwise (out of scope included)."""
    job = None
    if 1 <= job_id <= MAX_ID:
        job = _scoped(FutureJob.objects.filter(pk=job_id), principal).first()
    if job is None:
        raise not_found(f"No live job with id {job_id}; a job that ended is in the history (GET history?job_id=).")
    return job


def _fresh(pk: int) -> FutureJob:
    job = FutureJob.objects.filter(pk=pk).first()
    if job is None:
        raise not_found(f"Job {pk} ended meanwhile; see its history.")
    return job


def _registered(name: str, principal: Principal) -> Check:
    """The check ``name`` names, that a job may be scheduled for (an expectation's is refused)."""
    try:
        return schedulable(name)
    except WrongKind as exc:
        raise invalid("check", str(exc)) from None
    except UnknownCheck as exc:
        # Only names the caller may act on are suggested: a scoped token learns no others.
        scope = principal.scope()
        known = [s for s in exc.suggestions if scope is None or s in scope]
        raise invalid("check", f"Unknown check {name!r}.{did_you_mean(known)}") from None


def _entity(check: Check, model_label: str, key: str) -> models.Model:
    """The saved instance the job is about. Only the check's own model can be reached."""
    if check.model_label is None:
        raise invalid("check", f"The check {check.name!r} names no model, so it cannot be scheduled over the API.")
    if model_label.strip().lower() != check.model_label:
        raise invalid(
            "entity.model", f"The check {check.name!r} is about {check.model_label}, not {model_label!r}."
        )
    try:
        model = check.model
    except LookupError:
        raise invalid("check", f"The model {check.model_label} of check {check.name!r} is not installed.") from None
    assert model is not None
    missing = invalid("entity.key", f"No {check.model_label} with the key {key!r}.")
    pk_field = model._meta.pk
    assert pk_field is not None
    try:
        value = pk_field.to_python(key)
    except (DjangoValidationError, ValueError, TypeError):
        raise missing from None
    if value is None or not _in_range(pk_field, value):
        raise missing
    try:
        with transaction.atomic():  # a savepoint: a refused lookup must not spoil a caller's transaction
            instance = model._default_manager.filter(pk=value).first()
    except (DataError, ValueError, TypeError, OverflowError):
        raise missing from None
    if instance is None:
        raise missing
    return instance


def _in_range(field: models.Field[Any, Any], value: Any) -> bool:
    """Whether an integer key fits the column (a bigger one cannot exist, and some databases choke)."""
    target = getattr(field, "target_field", None) or field
    if not isinstance(value, int):
        return True
    try:
        low, high = connection.ops.integer_field_range(target.get_internal_type())
    except KeyError:
        return True
    return (low is None or value >= low) and (high is None or value <= high)


def _first_due(payload: TaskIn) -> tuple[datetime | None, timedelta | None]:
    if payload.at is not None and payload.delay_seconds is not None:
        message = "Give either at or delay_seconds, not both."
        raise ApiError(400, "The request is not valid.", {"at": [message], "delay_seconds": [message]})
    if payload.at is None and payload.delay_seconds is None:
        message = "Give at (a time) or delay_seconds (from now)."
        raise ApiError(400, "The request is not valid.", {"at": [message], "delay_seconds": [message]})
    if payload.delay_seconds is not None:
        return None, timedelta(seconds=payload.delay_seconds)
    return payload.at, None


# --- jobs -------------------------------------------------------------------------------------

#: The paths of live jobs were ``tasks/…`` before 0.4 (beside Django's own django.tasks, which
#: they are not); those paths still answer, marked deprecated, until 0.5.
DEPRECATED_JOB_PATHS = "tasks"


def job_route(method: str, suffix: str, *, operation_id: str, **options: Any) -> Callable[[_V], _V]:
    """Register a view of live jobs at ``jobs{suffix}`` (its operation id with ``job`` for
    ``task``) and, deprecated, at the old ``tasks{suffix}`` under its old operation id."""

    def register(view: _V) -> _V:
        add = getattr(api, method)
        add("jobs" + suffix, operation_id=operation_id.replace("task", "job"), tags=["jobs"], **options)(view)
        add(DEPRECATED_JOB_PATHS + suffix, operation_id=operation_id, tags=["deprecated: tasks paths"],
            deprecated=True, **options)(view)
        return view

    return register




@job_route(
    "post", "",
    auth=needs(ADD),
    response={200: Task, 201: Task, **_errors(400, 401, 403, 409, 503)},
    operation_id="create_task",
    summary="Schedule a check for an entity",
)
def create_task(request: HttpRequest, payload: TaskIn) -> Any:
    """201 with the new job; 200 with the pending job when the entity already has one for this
    check (unchanged, unless ``replace`` moves its due time)."""
    principal = caller(request)
    if not principal.allows(payload.check):
        raise forbidden(f"This token may not act on the check {payload.check!r}.", field="check")
    if payload.replace:
        principal.require(CHANGE)  # replace moves a pending job: that is a change
    check = _registered(payload.check, principal)
    instance = _entity(check, payload.entity.model, payload.entity.key)
    at, delay = _first_due(payload)
    now = timezone.now()
    if at is not None and at < now - EARLIEST:
        raise invalid("at", f"{at.isoformat()} is more than a day in the past.")
    try:
        job, created = verbs.schedule_job(
            instance, check, at=at, delay=delay, workflow=payload.workflow, replace=payload.replace, now=now,
            after=payload.after, on_parent_failure=payload.on_parent_failure,
        )
    except (UnknownParent, InvalidDependency) as exc:
        raise invalid("after", str(exc)) from None
    except (InvalidTime, OverflowError) as exc:
        message = str(exc) if isinstance(exc, InvalidTime) else "The time is out of range."
        raise invalid("at" if at is not None else "delay_seconds", message) from None
    if created:
        logger.info("api: job id=%s created check=%s by user=%s", job.pk, check.name, principal.user.pk)
    return Status(201 if created else 200, task_out(job))


@job_route(
    "get", "",
    auth=needs(VIEW),
    response={200: TaskPage, **_errors(400, 401, 403, 503)},
    operation_id="list_tasks",
    summary="List pending jobs",
)
def list_tasks(request: HttpRequest, filters: Query[TaskFilters]) -> Any:
    """Live jobs, oldest first (by id), a page at a time: pass ``next_cursor`` as ``cursor``."""
    queryset = _scoped(FutureJob.objects.all(), caller(request))
    if filters.state is not None:
        queryset = queryset.filter(state=filters.state)
    if filters.check is not None:
        queryset = queryset.filter(job_exec=filters.check)
    if filters.workflow is not None:
        queryset = queryset.filter(workflow=filters.workflow)
    if filters.entity:
        queryset = _by_entity(queryset, filters.entity)
    if filters.cursor:
        queryset = queryset.filter(pk__gt=decode_cursor(filters.cursor))
    rows, next_cursor = page(queryset.order_by("pk"), filters.limit)
    return {"items": tasks_out(rows), "next_cursor": next_cursor}


@job_route(
    "get", "/{job_id}",
    auth=needs(VIEW),
    response={200: Task, **_errors(400, 401, 403, 404, 503)},
    operation_id="get_task",
    summary="One pending job",
)
def get_task(request: HttpRequest, job_id: int) -> Any:
    return task_out(_job(caller(request), job_id))


# --- workflows --------------------------------------------------------------------------------


def _workflow_caller(request: HttpRequest, name: str) -> Principal:
    principal = caller(request)
    if not principal.all_checks:
        raise forbidden(
            "A workflow may hold jobs of any check: steering one needs a token allowed all checks."
        )
    if not name.strip():
        raise invalid("name", "Give a workflow name.")
    if not workflows.exists(name):
        raise ApiError(404, f"There is no workflow named {name!r}.{did_you_mean(closest(name, workflows.names()))}")
    return principal


@api.post(
    "workflows/{name}/pause",
    auth=needs(CHANGE),
    response={200: WorkflowOut, **_errors(400, 401, 403, 404, 503)},
    tags=["workflows"],
    operation_id="pause_workflow",
    summary="Pause a workflow",
)
def pause_workflow(request: HttpRequest, name: Text = params.Path(..., max_length=200)) -> Any:
    """Pauses its jobs, and jobs scheduled into it later start paused, until it is released."""
    _workflow_caller(request, name)
    changed = verbs.pause(workflow=name)
    return {"name": name, "paused": True, "changed": changed}


@api.post(
    "workflows/{name}/release",
    auth=needs(CHANGE),
    response={200: WorkflowOut, **_errors(400, 401, 403, 404, 503)},
    tags=["workflows"],
    operation_id="release_workflow",
    summary="Release a workflow",
)
def release_workflow(request: HttpRequest, name: Text = params.Path(..., max_length=200)) -> Any:
    """Each paused job of the workflow returns to the state it was paused in."""
    _workflow_caller(request, name)
    changed = verbs.release(workflow=name)
    return {"name": name, "paused": False, "changed": changed}


# --- history and health -----------------------------------------------------------------------


@api.get(
    "history",
    auth=needs(VIEW_HISTORY),
    response={200: HistoryPage, **_errors(400, 401, 403, 503)},
    tags=["history"],
    operation_id="list_history",
    summary="Jobs that ended",
)
def list_history(request: HttpRequest, filters: Query[HistoryFilters]) -> Any:
    """One row per job that left the live table, newest first, a page at a time."""
    queryset = _scoped(JobHistory.objects.all(), caller(request))
    if filters.outcome is not None:
        queryset = queryset.filter(outcome=filters.outcome)
    if filters.check is not None:
        queryset = queryset.filter(job_exec=filters.check)
    if filters.workflow is not None:
        queryset = queryset.filter(workflow=filters.workflow)
    if filters.entity:
        queryset = _by_entity(queryset, filters.entity)
    if filters.job_id is not None:
        queryset = queryset.filter(job_id=filters.job_id)
    if filters.rerun_of is not None:
        queryset = queryset.filter(rerun_of=filters.rerun_of)
    if filters.error is not None:
        queryset = history_with_error(queryset, filters.error)
    if filters.exception is not None:
        queryset = history_with_exception(queryset, filters.exception)
    if filters.cursor:
        queryset = queryset.filter(pk__lt=decode_cursor(filters.cursor))
    rows, next_cursor = page(queryset.order_by("-pk"), filters.limit)
    return {"items": histories_out(rows), "next_cursor": next_cursor}


@api.get(
    "health",
    auth=needs(VIEW),
    response={(200, 503): Health, **_errors(401, 403)},
    tags=["health"],
    operation_id="health",
    summary="Database, workers and lateness",
)
def health(request: HttpRequest) -> Any:
    """200 while the database answers (``status`` says whether jobs run late), 503 when not.

    Overdue jobs are counted among the checks the caller may see.
    """
    now = timezone.now()
    try:
        overdue = _scoped(FutureJob.objects.filter(state=State.SCHEDULED, next_check_at__lt=now), caller(request))
        count = overdue.count()
        oldest = overdue.order_by("next_check_at").values_list("next_check_at", flat=True).first()
        cutoff = now - timedelta(seconds=stale_after_seconds())
        workers = Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=cutoff).count()
    except DatabaseError as exc:
        logger.warning("api: health: database error: %s", exc)
        return Status(503, {
            "status": "unavailable", "database": False, "workers_alive": None, "overdue_jobs": None,
            "oldest_overdue_at": None, "lateness_seconds": None, "checked_at": now,
        })
    lateness = (now - oldest).total_seconds() if oldest is not None else None
    late = lateness is not None and lateness > int(setting("SLOT_MINUTES")) * 60
    return {
        "status": "late" if late else "ok",
        "database": True,
        "workers_alive": workers,
        "overdue_jobs": count,
        "oldest_overdue_at": oldest,
        "lateness_seconds": lateness,
        "checked_at": now,
    }
