"""``GET health/checks``: the health of each check over a recent window (:mod:`prescient.health`):
runs per minute, failure rate, run time p50/p95, last error, pending jobs and the most overdue."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Schema
from pydantic import Field

from ..health import DEFAULT_MINUTES, ERROR_CHARS, MAX_MINUTES, SAMPLE, health
from .auth import VIEW, VIEW_HISTORY, caller, needs
from .views import _errors, api


class HealthFilters(Schema):
    minutes: int = Field(
        DEFAULT_MINUTES, ge=1, le=MAX_MINUTES,
        description=f"The window, in minutes before now (1 to {MAX_MINUTES:,}; default {DEFAULT_MINUTES}).",
    )


class LastErrorOut(Schema):
    history_id: int = Field(description="The history row (`GET history`, its admin page).")
    finished_at: datetime
    outcome: str = Field(description="How that job ended; a job that completed on a retry keeps its last error.")
    exception_class: str = Field(description="`module.Name`; empty when not known.")
    error: str = Field(description=f"The error's text (its first {ERROR_CHARS} characters).")
    entity_name: str
    entity_key: str


class CheckHealthOut(Schema):
    name: str
    finished: int = Field(description="Jobs that finished in the window.")
    failed: int = Field(description="Of those, ended `failed`.")
    runs: int = Field(description="Their runs (a job's runs count when it finishes).")
    failed_runs: int = Field(description="Their failed runs, retried ones included.")
    runs_per_minute: float = Field(description="`runs` over the window's minutes.")
    failure_rate: float | None = Field(description="`failed_runs / runs`, 0 to 1; null when nothing ran.")
    run_seconds_p50: float | None = Field(
        description=f"Time per run of each check's latest {SAMPLE:,} jobs of the window (interpolated as "
                    "`percentile_cont`); null when none ran."
    )
    run_seconds_p95: float | None
    last_error: LastErrorOut | None = Field(description="The newest job of the window with an error.")
    pending: int = Field(description="Live jobs, any state.")
    pending_estimated: bool = Field(
        description="Whether `pending` is PostgreSQL's estimate (beyond 100,000 live jobs), not a count."
    )
    due: int = Field(description="Scheduled jobs whose time has come.")
    due_estimated: bool = Field(
        description="Whether `due` is PostgreSQL's estimate (beyond 100,000 live jobs and 10,000 due in the "
                    "check), not a count."
    )
    oldest_overdue_seconds: float | None = Field(description="How late the most overdue of those is.")
    held: int = Field(description="Of the due jobs, those a full limit or an empty rate bucket holds back.")
    held_by: dict[str, int] = Field(description="The same, per limit or rate (by name).")


class HealthOut(Schema):
    minutes: int
    since: datetime
    until: datetime
    checks: list[CheckHealthOut] = Field(
        description="By name: each check with a job finished in the window or pending."
    )


@api.get(
    "health/checks",
    auth=needs(VIEW),
    response={200: HealthOut, **_errors(400, 401, 403, 503)},
    tags=["health"],
    operation_id="check_health",
    summary="Each check's runs, failures, run times, last error and pending jobs",
)
def check_health(request: HttpRequest, filters: Query[HealthFilters]) -> Any:
    """Per check, over the past ``minutes``: runs per minute, failure rate, run time p50/p95 and
    last error, from the history; pending, due and the most overdue, from the live table. Needs
    the history's view permission too (the errors are the history's); a token sees its checks."""
    principal = caller(request).require(VIEW_HISTORY)
    report = health(timezone.now(), minutes=filters.minutes, names=principal.scope())
    # Times in answers are in UTC, as everywhere in the API.
    since, until = (datetime.fromisoformat(value).astimezone(UTC) for value in (report.since, report.until))
    return {**report.as_dict(), "since": since, "until": until}
