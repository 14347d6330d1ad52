"""The SLA of expectations, day by day: how many were met within each rung of their ladder, how
many missed, how many ended otherwise, and how long meeting took (p50, p95). One read shared by
the admin's dashboard, ``GET expectations/{name}/sla`` and ``prescient_status``.

Read from the history, one row per expectation that ended:

- **met within rung k**: outcome ``met`` with ``payload["step"] == k - 1``, met before its k-th
  rung fired (its handler called k - 1 times; step 0: met before the first rung);
- **missed**: outcome ``missed``, its last rung passed unmet;
- **other**: any other end (the instance deleted, failed, cancelled, killed).

A row counts on the day it ended (``finished_at``), in the site's time zone (``TIME_ZONE``): the
days a person reads in the admin. Time to met is ``payload["met_at"] - payload["start"]``, with
``finished_at`` for a missing ``met_at`` and ``created_at`` for a missing ``start`` (rows written
before the payload kept it); never below zero (a start set in the future).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, F, Window
from django.db.models.fields.json import KT
from django.db.models.functions import RowNumber, TruncDate
from django.utils import timezone

from .clock import db_now, from_iso
from .expectations import KIND, registered
from .models import JobHistory
from .states import Outcome

#: Days shown when none is asked for: this week, today included.
DEFAULT_DAYS = 7
#: The longest window: what the history keeps of met and missed jobs by default
#: (``HISTORY_RETENTION_DAYS``).
MAX_DAYS = 90
#: Met jobs read per expectation for its percentiles, newest first: a bound on the rows read,
#: whatever the traffic. A busier window's percentiles are those of its latest met jobs.
SAMPLE = 10_000


@dataclass
class SlaDay:
    #: The day, ``YYYY-MM-DD``, in the site's time zone.
    date: str
    #: ``met[k - 1]``: met within rung k.
    met: list[int]
    missed: int = 0
    #: Ended otherwise: the instance deleted, failed, cancelled or killed.
    other: int = 0


@dataclass
class ExpectationSla:
    name: str
    #: The ladder's offsets from the start, in seconds (a column per rung; a met row from a
    #: longer ladder declared before adds columns past these).
    ladder_seconds: list[float]
    #: The time zone the days are counted in (``TIME_ZONE``).
    time_zone: str
    #: The window: from the start of its first day to ``now``, ISO 8601.
    since: str
    until: str
    #: Newest first (today, then the days before).
    days: list[SlaDay] = field(default_factory=list)
    #: The window's totals, as in a day.
    met: list[int] = field(default_factory=list)
    missed: int = 0
    other: int = 0
    #: Time from the start to met, in seconds, over the window's met jobs (nearest rank).
    time_to_met_p50_seconds: float | None = None
    time_to_met_p95_seconds: float | None = None
    #: How many met jobs those are: all of the window's, or its latest :data:`SAMPLE`.
    time_to_met_count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], percent: int) -> float | None:
    """The nearest-rank percentile: the smallest value that ``percent`` % of ``values`` do not
    exceed (always one of them); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-percent * len(ordered) // 100))  # ceil, in integers: no float rounding
    return ordered[rank - 1]


def _step(value: object) -> int:
    """A payload's ``step`` as read by a key transform (text or a number); 0 when absent or odd."""
    try:
        step = int(str(value))
    except ValueError:
        return 0
    return max(step, 0)


def window_start(now: datetime, days: int) -> datetime:
    """The start of the first of ``days`` days ending with ``now``'s day, in the site's time zone."""
    zone = timezone.get_default_timezone()
    first = timezone.localtime(now, zone).date() - timedelta(days=days - 1)
    return timezone.make_aware(datetime.combine(first, time()), zone)


def sla(
    now: datetime | None = None, *, days: int = DEFAULT_DAYS, names: Collection[str] | None = None
) -> list[ExpectationSla]:
    """The SLA of every registered expectation (or of ``names`` among them), by name, over the
    ``days`` days ending with ``now``'s day (default: the database's time); see the module's
    docstring for what is counted. Two queries, whatever the number of expectations; none when
    none is declared."""
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be from 1 to {MAX_DAYS}, got {days}")
    declared = [entry for entry in registered() if names is None or entry.name in names]
    if not declared:
        return []
    now = now or db_now()
    zone = timezone.get_default_timezone()
    since = window_start(now, days)
    ended = JobHistory.objects.filter(
        kind=KIND, job_exec__in=[entry.name for entry in declared], finished_at__gte=since, finished_at__lte=now
    ).order_by()

    today = timezone.localtime(now, zone).date()
    dates = [today - timedelta(days=n) for n in range(days)]
    counts: dict[tuple[str, date, str, int], int] = {}
    grouped = ended.annotate(day=TruncDate("finished_at", tzinfo=zone), step=KT("payload__step"))
    for row in grouped.values("job_exec", "day", "outcome", "step").annotate(n=Count("id")):
        step = _step(row["step"]) if row["outcome"] == Outcome.MET else 0
        key = (row["job_exec"], row["day"], row["outcome"], step)
        counts[key] = counts.get(key, 0) + row["n"]

    durations: dict[str, list[float]] = {entry.name: [] for entry in declared}
    latest = ended.filter(outcome=Outcome.MET).annotate(
        rank=Window(RowNumber(), partition_by=[F("job_exec")], order_by=F("finished_at").desc()),
        start_text=KT("payload__start"), met_text=KT("payload__met_at"),
    ).filter(rank__lte=SAMPLE)
    for name, start_text, met_text, finished_at, created_at in latest.values_list(
        "job_exec", "start_text", "met_text", "finished_at", "created_at"
    ):
        start = from_iso(start_text) or created_at
        met_at = from_iso(met_text) or finished_at
        durations[name].append(max((met_at - start).total_seconds(), 0.0))

    return [
        _one(entry.name, [step.total_seconds() for step in entry.ladder], dates, counts, durations[entry.name],
             zone_name=timezone.get_default_timezone_name(), since=since, until=now)
        for entry in declared
    ]


def _one(
    name: str, ladder_seconds: list[float], dates: list[date], counts: dict[tuple[str, date, str, int], int],
    durations: list[float], *, zone_name: str, since: datetime, until: datetime,
) -> ExpectationSla:
    """One expectation's SLA from the grouped counts of them all."""
    mine = {key[1:]: n for key, n in counts.items() if key[0] == name}
    rungs = max([len(ladder_seconds), *(step + 1 for (_day, outcome, step) in mine if outcome == Outcome.MET)])
    days = []
    for day in dates:
        row = SlaDay(date=day.isoformat(), met=[0] * rungs)
        for (when, outcome, step), n in mine.items():
            if when != day:
                continue
            if outcome == Outcome.MET:
                row.met[step] += n
            elif outcome == Outcome.MISSED:
                row.missed += n
            else:
                row.other += n
        days.append(row)
    return ExpectationSla(
        name=name, ladder_seconds=ladder_seconds, time_zone=zone_name, since=since.isoformat(),
        until=until.isoformat(), days=days,
        met=[sum(day.met[k] for day in days) for k in range(rungs)],
        missed=sum(day.missed for day in days), other=sum(day.other for day in days),
        time_to_met_p50_seconds=_rounded(percentile(durations, 50)),
        time_to_met_p95_seconds=_rounded(percentile(durations, 95)),
        time_to_met_count=len(durations),
    )


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
