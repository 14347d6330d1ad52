"""A snapshot of the scheduler's health, shared by ``prescient_status``, the API and the admin."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q

from . import limits
from .clock import db_now
from .conf import stale_after_seconds
from .counting import counts
from .expectations import KIND, registered
from .health import DEFAULT_MINUTES, Health, health
from .models import FutureJob, JobHistory, Worker
from .sla import DEFAULT_DAYS, ExpectationSla, sla
from .states import Outcome, State

#: The window of the met and missed counts of expectations.
EXPECTATION_WINDOW = timedelta(hours=24)


def alive_workers(now: datetime | None = None) -> list[Worker]:
    """Workers that heart-beat within the stale period and have not stopped."""
    now = now or db_now()
    cutoff = now - timedelta(seconds=stale_after_seconds())
    return list(Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=cutoff))


@dataclass
class WorkerInfo:
    name: str
    hostname: str
    pid: int
    concurrency: int
    started_at: str
    heartbeat_at: str
    heartbeat_age_seconds: float
    jobs_done: int
    #: The worker's host clock minus the database's, at its last heartbeat.
    clock_skew_seconds: float = 0.0
    #: Jobs each of its children runs at once.
    lanes: int = 1


@dataclass
class ExpectationInfo:
    name: str
    model: str
    #: The ladder's offsets from the start, in seconds.
    ladder_seconds: list[float]
    #: A calendar's name, "(per instance)" when chosen by a callable, or None.
    calendar: str | None
    pending: int
    #: Ended ``met`` / ``missed`` in the 24 hours before ``now``.
    met: int
    missed: int


def expectations(now: datetime) -> list[ExpectationInfo]:
    """Every registered expectation: pending jobs, and met and missed in the past 24 hours
    (two grouped queries, whatever the number of expectations; none when there is none)."""
    declared = list(registered())
    if not declared:
        return []
    pending: dict[str, int] = {}
    # Each by its model and name: a range of the one-pending-job index, not a scan of the table.
    ours = Q()
    for entry in declared:
        ours |= Q(entity_name=entry.model_label, job_exec=entry.name)
    for row in FutureJob.objects.filter(ours, kind=KIND).order_by().values("job_exec").annotate(n=Count("id")):
        pending[row["job_exec"]] = row["n"]
    ended: dict[tuple[str, str], int] = {}
    rows = JobHistory.objects.filter(
        outcome__in=[Outcome.MET, Outcome.MISSED], finished_at__gte=now - EXPECTATION_WINDOW, finished_at__lte=now
    )
    for row in rows.order_by().values("job_exec", "outcome").annotate(n=Count("id")):
        ended[(row["job_exec"], row["outcome"])] = row["n"]
    return [
        ExpectationInfo(
            name=entry.name, model=entry.model_label,
            ladder_seconds=[step.total_seconds() for step in entry.ladder],
            calendar=entry.calendar if isinstance(entry.calendar, str) or entry.calendar is None else "(per instance)",
            pending=pending.get(entry.name, 0),
            met=ended.get((entry.name, Outcome.MET), 0), missed=ended.get((entry.name, Outcome.MISSED), 0),
        )
        for entry in declared
    ]


@dataclass
class Status:
    now: str
    states: dict[str, int]
    due_now: int
    oldest_overdue_seconds: float | None
    workers: list[WorkerInfo] = field(default_factory=list)
    last_slot_at: str | None = None
    expectations: list[ExpectationInfo] = field(default_factory=list)
    #: Due jobs held back, per limit or rate (by name); empty when none is declared.
    held: dict[str, int] = field(default_factory=dict)
    #: The counts that are PostgreSQL's planner estimate, not exact: states, and "due" (beyond
    #: 10,000 jobs in one; see :func:`prescient.counting.counts`).
    estimated: list[str] = field(default_factory=list)
    #: Each expectation's SLA, day by day (:mod:`prescient.sla`), in the order of ``expectations``.
    sla: list[ExpectationSla] = field(default_factory=list)
    #: Each check's runs, failures, run times, last error and pending jobs (:mod:`prescient.health`).
    health: Health | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot(
    now: datetime | None = None, *, sla_days: int = DEFAULT_DAYS, health_minutes: int = DEFAULT_MINUTES
) -> Status:
    """Counts per state, jobs due, the oldest overdue job's lateness, live workers, last slot,
    expectations and their SLA over ``sla_days`` days, and the health of each check over the
    ``health_minutes`` before ``now`` (by default the database's time)."""
    now = now or db_now()
    # Exact up to 10,000 a count, the planner's estimate beyond (PostgreSQL): at ten million
    # jobs a GROUP BY state read the whole table (counting.counts, as the metrics count).
    due = FutureJob.objects.due(now).order_by()
    counted = counts({**{state.value: FutureJob.objects.filter(state=state) for state in State}, "due": due})
    oldest = due.aggregate(oldest=Min("next_check_at"))["oldest"]
    workers = [
        WorkerInfo(
            name=w.name, hostname=w.hostname, pid=w.pid, concurrency=w.concurrency,
            started_at=w.started_at.isoformat(), heartbeat_at=w.heartbeat_at.isoformat(),
            heartbeat_age_seconds=round((now - w.heartbeat_at).total_seconds(), 1), jobs_done=w.jobs_done,
            clock_skew_seconds=round(w.clock_skew_seconds, 3), lanes=w.lanes,
        )
        for w in alive_workers(now)
    ]
    last_slot = Worker.objects.aggregate(last=Max("last_slot_at"))["last"]
    return Status(
        now=now.isoformat(),
        states={state.value: counted[state.value][0] for state in State},
        due_now=counted["due"][0],
        estimated=[name for name, (_n, exact) in counted.items() if not exact],
        oldest_overdue_seconds=None if oldest is None else round((now - oldest).total_seconds(), 1),
        workers=workers,
        last_slot_at=None if last_slot is None else last_slot.isoformat(),
        expectations=expectations(now),
        held=limits.held_counts(now, db_now() if limits.declared() else now),
        sla=sla(now, days=sla_days),
        health=health(now, minutes=health_minutes),
    )
