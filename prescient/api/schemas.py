"""Request and response payloads of the JSON API. The OpenAPI document is generated from these.

Inputs are strict: unknown fields, wrong JSON types (``"5"`` for a number, ``1`` for a boolean)
and strings the database cannot store (NUL characters, lone surrogates) are refused with a 400.
Times are ISO 8601 strings with a UTC offset; times in answers are in UTC (``...Z``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from ..conf import MAX_DELAY_SECONDS
from ..sla import DEFAULT_DAYS, MAX_DAYS, SAMPLE
from ..states import Outcome, State

#: Page sizes of the lists.
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: Longest interval of a schedule (the column's limit, about 68 years).
MAX_EVERY_SECONDS = 2**31 - 1

TIME_EXAMPLE = "2026-11-22T10:00:00+00:00"


def _text(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("text_nul", "Must not contain NUL characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("text_unicode", "Must be valid Unicode text.") from None
    return value


#: A string the database can store.
Text = Annotated[str, AfterValidator(_text)]
#: A job's id: a positive integer that fits the bigint column (2**63 would be a database error).
JobId = Annotated[StrictInt, Field(ge=1, le=2**63 - 1)]


def _entity_key(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise PydanticCustomError("entity_key", "Give the key as a string or an integer.")
    return value


EntityKey = Annotated[
    str,
    BeforeValidator(_entity_key),
    Field(min_length=1, max_length=255),
    AfterValidator(_text),
    WithJsonSchema(
        {
            "oneOf": [{"type": "string", "minLength": 1, "maxLength": 255}, {"type": "integer"}],
            "description": "The primary key of the instance.",
            "examples": ["42"],
        }
    ),
]


def _aware_time(value: Any) -> datetime:
    if not isinstance(value, str) or len(value) > 64:
        raise PydanticCustomError(
            "datetime_type",
            "Give an ISO 8601 date and time with a UTC offset, e.g. {example}.",
            {"example": TIME_EXAMPLE},
        )
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise PydanticCustomError(
            "datetime_parsing", "Not an ISO 8601 date and time; e.g. {example}.", {"example": TIME_EXAMPLE}
        ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise PydanticCustomError(
            "timezone_aware",
            "The time has no UTC offset, so it is ambiguous; e.g. {example}.",
            {"example": TIME_EXAMPLE},
        )
    try:
        parsed.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError("datetime_range", "The time is out of range.") from None
    return parsed


#: An ISO 8601 date and time that must carry a UTC offset.
AwareTime = Annotated[
    datetime,
    PlainValidator(_aware_time),
    WithJsonSchema({"type": "string", "format": "date-time", "examples": [TIME_EXAMPLE]}),
]


def _reason(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("reason_blank", "Give a reason.")
    return value.strip()


def _schedule_name(value: str) -> str:
    # The name is a path segment of the schedule's URLs: "/" (even as %2F) could never reach it.
    if not value.strip() or "/" in value:
        raise PydanticCustomError("schedule_name", "Give a name that is not blank and has no '/'.")
    return value


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


# --- requests ---------------------------------------------------------------------------------


class EntityRef(Strict):
    model: Text = Field(
        min_length=1, max_length=100,
        description="Model label, e.g. `shop.order` (any case). Must be the model of the check.",
        examples=["shop.order"],
    )
    key: EntityKey


class TaskIn(Strict):
    """Give exactly one of ``at`` and ``delay_seconds``."""

    check: Text = Field(
        min_length=1, max_length=200, description="A registered check name.", examples=["shop.unshipped"]
    )
    entity: EntityRef
    at: AwareTime | None = Field(None, description="When the first check is due (rounded up to a slot).")
    delay_seconds: StrictInt | None = Field(
        None, ge=0, le=MAX_DELAY_SECONDS, description="Seconds from now to the first check (rounded up to a slot)."
    )
    workflow: Text = Field("", max_length=200, description="Group name for pausing and releasing jobs together.")
    replace: StrictBool = Field(
        False, description="When the job already exists, move its due time to the one given here."
    )
    after: list[JobId] = Field(
        default_factory=list, max_length=100,
        description="Ids of jobs (live or finished) this one runs after: it is `waiting` until they have all ended.",
    )
    on_parent_failure: Literal["cancel", "run"] = Field(
        "cancel", description="When a job it runs after ends other than `completed`: cancel this one, or run it.",
    )


class KillIn(Strict):
    reason: Annotated[Text, AfterValidator(_reason)] = Field(
        min_length=1, max_length=2000, description="Kept in the job's history row."
    )


class SleepIn(Strict):
    at: AwareTime = Field(
        description=(
            "When the job is next due (rounded up to a slot; at most a day in the past, within the check's "
            "horizon). A job whose run is in flight is asked to stop; its result is discarded when it returns."
        )
    )


class TaskFilters(Schema):
    state: State | None = Field(None, description="Only jobs in this state.")
    check: Text | None = Field(None, max_length=200, description="Only jobs of this check.")
    workflow: Text | None = Field(None, max_length=200, description="Only jobs of this workflow.")
    entity: Text | None = Field(
        None, max_length=400, description="`app.model` for every instance of a model, or `app.model:key` for one."
    )
    cursor: Text | None = Field(None, max_length=100, description="`next_cursor` of the previous page.")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Page size.")


class HistoryFilters(Schema):
    outcome: Outcome | None = Field(None, description="Only jobs that ended with this outcome.")
    check: Text | None = Field(None, max_length=200, description="Only jobs of this check.")
    workflow: Text | None = Field(None, max_length=200, description="Only jobs of this workflow.")
    entity: Text | None = Field(
        None, max_length=400, description="`app.model` for every instance of a model, or `app.model:key` for one."
    )
    job_id: int | None = Field(None, ge=1, le=2**63 - 1, description="Only the history row of this job.")
    rerun_of: int | None = Field(None, ge=1, le=2**63 - 1, description="Only the re-runs of this history entry.")
    error: Text | None = Field(None, max_length=500, examples=["carrier down"], description=(
        "Only jobs whose last error contains this text, in any case (empty: every job with an error). "
        "A part of a text is no index lookup: on a large history, narrow it by check, outcome or workflow."
    ))
    exception: Text | None = Field(
        None, max_length=300, examples=["TimeoutError"],
        description=(
            "Only jobs whose exception class is this one: by its path (`builtins.TimeoutError`) or its last "
            "dotted parts (`TimeoutError`, `carriers.CarrierDown`), never a part of a name, case counting "
            "(empty: every job with one)."
        ),
    )
    cursor: Text | None = Field(None, max_length=100, description="`next_cursor` of the previous page.")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Page size.")


class ScheduleIn(Strict):
    """Give exactly one of ``cron`` and ``every_seconds``. The same name again updates the schedule."""

    name: Annotated[Text, AfterValidator(_schedule_name)] = Field(
        min_length=1, max_length=200, description="Unique name of the schedule (not blank, no `/`).",
        examples=["billing.remind-42"],
    )
    check: Text = Field(
        min_length=1, max_length=200, description="A registered check name.", examples=["shop.unshipped"]
    )
    entity: EntityRef
    cron: Text | None = Field(
        None, min_length=1, max_length=120, description="A 5-field cron expression, read in `timezone`.",
        examples=["0 9 * * MON"],
    )
    every_seconds: StrictInt | None = Field(
        None, ge=1, le=MAX_EVERY_SECONDS,
        description="An interval in seconds (at least one slot), counted from the UTC epoch.",
    )
    timezone: Text = Field("UTC", min_length=1, max_length=64, description="IANA time zone name.",
                           examples=["America/New_York"])
    catch_up: Literal["latest", "all", "skip"] = Field(
        "latest", description=(
            "Occurrences missed while nothing ran: run the newest once (`latest`) or none (`skip`). "
            "`all` is for task schedules and refused here."
        ),
    )
    workflow: Text = Field("", max_length=200, description="The occurrences' jobs join this workflow.")


class ScheduleFilters(Schema):
    check: Text | None = Field(None, max_length=200, description="Only schedules of this check.")
    entity: Text | None = Field(
        None, max_length=400, description="`app.model` for every instance of a model, or `app.model:key` for one."
    )
    paused: bool | None = Field(None, description="Only paused (true) or active (false) schedules.")
    cursor: Text | None = Field(None, max_length=100, description="`next_cursor` of the previous page.")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Page size.")


# --- responses --------------------------------------------------------------------------------


class EntityOut(Schema):
    model: str = Field(description="Model label, lower case.")
    key: str


class LadderOut(Schema):
    """Where an expectation's job stands on its ladder."""

    rungs: list[datetime] = Field(description="Its rungs' times, fixed when it was expected.")
    step: int = Field(description="Rungs climbed so far (handlers called).")
    met_at: datetime | None = Field(description="When it was met (null unless it ended `met`).")


class Task(Schema):
    """A pending job (it leaves the live table, for the history, when it ends)."""

    id: int
    check: str
    kind: str = Field(description="`check`, `expectation` or `task`.")
    ladder: LadderOut | None = Field(description="An expectation's rungs and step (null for other kinds).")
    entity: EntityOut
    workflow: str
    state: State
    last_state: State | None = Field(description="The state a paused job returns to on release.")
    next_check_at: datetime
    first_check_at: datetime
    created_at: datetime
    check_count: int = Field(description="Times re-scheduled by its check.")
    run_count: int
    failure_count: int
    total_run_seconds: float
    in_flight: bool = Field(description="A run is under way.")
    end_requested: Outcome | None = Field(description="Set when killed or cancelled while a run is in flight.")
    last_error: str
    held_by: str | None = Field(
        None, description="Why a due job waits: the limit or rate per key that holds it back (null: none)."
    )
    parents: list[int] = Field(description="Ids of the jobs this one runs after.")
    children: list[int] = Field(description="Ids of the jobs that run after this one.")
    rerun_of: int | None = Field(None, description="The history entry this job runs again (null: none).")


class TaskPage(Schema):
    items: list[Task]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class KillOut(Schema):
    """The answer of a kill or a cancel."""

    id: int
    result: Literal["ended", "requested"] = Field(
        description=(
            "`ended`: the job is in the history now. "
            "`requested`: its run is in flight and it ends when the run returns."
        )
    )


class WorkflowOut(Schema):
    name: str
    paused: bool
    changed: int = Field(description="Jobs paused (or released) by this call.")


class HistoryEntry(Schema):
    id: int
    job_id: int
    check: str
    kind: str = Field(description="`check`, `expectation` or `task`.")
    ladder: LadderOut | None = Field(description="An expectation's rungs, step and `met_at` (null for other kinds).")
    entity: EntityOut
    workflow: str
    outcome: Outcome
    check_count: int
    run_count: int
    failure_count: int
    total_run_seconds: float
    first_check_at: datetime
    created_at: datetime
    finished_at: datetime
    last_error: str
    reason: str = Field(description="Why it ended: a kill's reason, a horizon's, an error handler's that gave up.")
    asked_check_at: datetime | None = Field(
        description="Outcome `horizon`: the next check its check asked for (null otherwise)."
    )
    parents: list[int] = Field(description="Ids of the jobs this one ran after.")
    children: list[int] = Field(description="Ids of the jobs that run after this one.")
    rerun_of: int | None = Field(None, description="The history entry this job ran again (null: none).")


class HistoryPage(Schema):
    items: list[HistoryEntry]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class ScheduleOut(Schema):
    """A recurring schedule: each occurrence becomes a job of its own."""

    name: str
    kind: str = Field(description="`check`, or `task` for a task schedule declared in code.")
    check: str = Field(description="The check started (or the task enqueued) at each occurrence.")
    entity: EntityOut | None = Field(description="The instance a check schedule starts its check on.")
    cron: str | None
    every_seconds: int | None
    timezone: str
    when: str = Field(description="The expression and zone in words.")
    catch_up: Literal["latest", "all", "skip"]
    workflow: str
    next_at: datetime = Field(description="The next occurrence.")
    due_at: datetime = Field(description="The next occurrence rounded up to a slot: when its job is due.")
    paused: bool = Field(description="A paused schedule produces nothing and counts nothing as missed.")
    paused_at: datetime | None
    declared: bool = Field(description="Declared in code with `@prescient.periodic` (kept in step with it).")
    runs: int
    skipped: int = Field(description="Occurrences not run: the previous job was still pending.")
    missed: int = Field(description="Occurrences not run: nothing ran while they were due.")
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime


class ScheduleDetail(ScheduleOut):
    upcoming: list[datetime] = Field(description="The next five occurrences.")


class SchedulePage(Schema):
    items: list[ScheduleOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class Health(Schema):
    status: Literal["ok", "late", "unavailable"] = Field(
        description="`late`: a scheduled job is overdue by more than a slot (no tick or worker is keeping up)."
    )
    database: bool = Field(description="The database answered.")
    workers_alive: int | None = Field(description="prescient_worker processes heart-beating and not stopped.")
    overdue_jobs: int | None = Field(description="Scheduled jobs whose due time has passed.")
    oldest_overdue_at: datetime | None
    lateness_seconds: float | None = Field(description="How long the oldest overdue job has been waiting.")
    checked_at: datetime


class ExpectationOut(Schema):
    name: str
    model: str = Field(description="The model label, e.g. `shop.order`.")
    ladder_seconds: list[float] = Field(description="The rungs' offsets from the start, in seconds.")
    calendar: str | None = Field(description="Its calendar; `(per instance)` when a callable picks it.")
    pending: int = Field(description="Pending jobs of this expectation.")
    met: int = Field(description="Ended `met` in the past 24 hours.")
    missed: int = Field(description="Ended `missed` in the past 24 hours.")


class SlaFilters(Schema):
    days: int = Field(
        DEFAULT_DAYS, ge=1, le=MAX_DAYS, description=f"Days, today included, in the site's time zone (1 to {MAX_DAYS})."
    )


class SlaDayOut(Schema):
    date: str = Field(description="`YYYY-MM-DD`, in `time_zone`.")
    met: list[int] = Field(description="`met[k - 1]`: met within rung k (before it fell due).")
    missed: int
    other: int = Field(description="Ended otherwise: the instance deleted, failed, cancelled or killed.")


class ExpectationSlaOut(Schema):
    name: str
    ladder_seconds: list[float] = Field(description="The rungs' offsets from the start, in seconds.")
    time_zone: str = Field(description="The zone of the days: the site's `TIME_ZONE`.")
    since: datetime = Field(description="The start of the first day.")
    until: datetime
    days: list[SlaDayOut] = Field(description="Newest first.")
    met: list[int] = Field(description="The window's totals, as in a day.")
    missed: int
    other: int
    time_to_met_p50_seconds: float | None = Field(description="From the start to met; null when none was met.")
    time_to_met_p95_seconds: float | None
    time_to_met_count: int = Field(
        description=f"The met jobs the percentiles are of (the window's latest {SAMPLE:,} at most)."
    )


class Error(Schema):
    status: int
    code: Literal[
        "invalid", "unauthenticated", "forbidden", "not_found", "method_not_allowed", "conflict", "unavailable"
    ]
    message: str
    fields: dict[str, list[str]] = Field(description="Messages per field (`body` for the body as a whole).")
