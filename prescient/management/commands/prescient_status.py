from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from prescient import reads
from prescient.health import DEFAULT_MINUTES, MAX_MINUTES, CheckHealth, Health
from prescient.sla import DEFAULT_DAYS, MAX_DAYS, ExpectationSla
from prescient.status import snapshot
from prescient.wording import offset_text

from ._args import PrescientCommand, Whole, aware_datetime

#: Seconds of clock skew between a worker's host and the database above which status warns.
CLOCK_SKEW_WARNING = 1.0


class Command(PrescientCommand):
    help = (
        "Show counts per state, jobs due now, lateness, live workers, the last slot processed and the "
        "health of each check (runs, failures, run times, last error, pending, oldest overdue)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")
        parser.add_argument("--now", type=aware_datetime, default=None, help="As of this time (ISO 8601 with offset).")
        parser.add_argument(
            "--sla-days", type=Whole(1, MAX_DAYS, " of days"), default=DEFAULT_DAYS, metavar="N",
            help=f"Days of each expectation's SLA, today included (default {DEFAULT_DAYS}).",
        )
        parser.add_argument(
            "--health-minutes", type=Whole(1, MAX_MINUTES, " of minutes"), default=DEFAULT_MINUTES, metavar="N",
            help=f"The window of each check's health, in minutes before now (default {DEFAULT_MINUTES}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with reads.reading() as alias:  # off the primary when READ_DATABASE names a replica
            as_of = reads.as_of(alias)
            status = snapshot(options["now"], sla_days=options["sla_days"], health_minutes=options["health_minutes"])
        if options["json"]:
            # "as_of": the last replay of the replica read, when it lags (docs/operations.md).
            figures = {**status.as_dict(), "as_of": as_of.isoformat() if as_of else None}
            self.stdout.write(json.dumps(figures, sort_keys=True))
            return
        write = self.stdout.write
        if as_of is not None:
            write(f"as of:   {as_of.isoformat()} (the last replay of the replica {alias!r}, which lags)")
        write("jobs:    " + "  ".join(
            f"{state}={'~' if state in status.estimated else ''}{count}" for state, count in status.states.items()
        ) + ("  (~: PostgreSQL's estimate)" if status.estimated else ""))
        held = held_by(status.held)
        due = f"{'~' if 'due' in status.estimated else ''}{status.due_now}"
        write(f"due now: {due}" + (f" (held back by limits: {held})" if held else ""))
        lateness = "-" if status.oldest_overdue_seconds is None else f"{status.oldest_overdue_seconds:.0f}s"
        write(f"oldest overdue: {lateness}")
        write(f"last slot processed: {status.last_slot_at or '-'}")
        write(f"workers alive: {len(status.workers)}")
        for w in status.workers:
            write(
                f"  {w.name}  host={w.hostname} pid={w.pid} concurrency={w.concurrency} lanes={w.lanes} "
                f"heartbeat {w.heartbeat_age_seconds:.0f}s ago, jobs done {w.jobs_done}, "
                f"clock skew {w.clock_skew_seconds:+.3f}s"
            )
        if status.expectations:
            write(f"expectations: {len(status.expectations)} (met / missed in the past 24 hours)")
        reports = {report.name: report for report in status.sla}
        for e in status.expectations:
            ladder = ", ".join(offset_text(seconds) for seconds in e.ladder_seconds)
            calendar = f" calendar={e.calendar}" if e.calendar else ""
            write(
                f"  {e.name}  model={e.model} ladder=[{ladder}]{calendar} "
                f"pending={e.pending} met={e.met} missed={e.missed}"
            )
            if e.name in reports:
                for line in sla_lines(reports[e.name]):
                    write("    " + line)
        if status.health is not None:
            for line in health_lines(status.health):
                write(line)
        for w in status.workers:
            if abs(w.clock_skew_seconds) > CLOCK_SKEW_WARNING:
                self.stderr.write(self.style.WARNING(
                    f"warning: the clock of {w.hostname} (worker {w.name}) is {w.clock_skew_seconds:+.1f}s off the "
                    "database's; prescient judges time by the database, but fix the host's clock (NTP)"
                ))


def sla_lines(report: ExpectationSla) -> list[str]:
    """An expectation's SLA as a few lines: the window's totals and percentiles, then a table of
    its days (newest first), a column per rung."""
    def duration(seconds: float | None) -> str:
        return "-" if seconds is None else offset_text(seconds)

    met = " ".join(f"rung {k}={n}" for k, n in enumerate(report.met, 1))
    heads = [*(f"rung {k}" for k in range(1, len(report.met) + 1)), "missed", "other"]
    rows = [[*day.met, day.missed, day.other] for day in report.days]
    widths = [max(len(head), *(len(str(row[i])) for row in rows)) for i, head in enumerate(heads)]
    summary = (
        f"SLA, {len(report.days)} days to {report.days[0].date} ({report.time_zone}): met within {met} "
        f"missed={report.missed} other={report.other}; time to met p50={duration(report.time_to_met_p50_seconds)} "
        f"p95={duration(report.time_to_met_p95_seconds)} (of {report.time_to_met_count} met)"
    )
    return [
        summary,
        "day         " + "  ".join(head.rjust(width) for head, width in zip(heads, widths, strict=True)),
        *(
            f"{day.date}  " + "  ".join(str(n).rjust(width) for n, width in zip(row, widths, strict=True))
            for day, row in zip(report.days, rows, strict=True)
        ),
    ]


def health_lines(report: Health) -> list[str]:
    """Each check's health: a line of figures, and its last error beneath (its first line)."""
    if not report.checks:
        return [f"checks: none finished a job in the past {report.minutes} minutes, none pending"]
    lines = [f"checks: {len(report.checks)} (health over the past {report.minutes} minutes)"]
    for check in report.checks:
        lines.append(f"  {check.name}  {health_figures(check)}")
        error = check.last_error
        if error is not None:
            text = (error.error.strip().splitlines() or [""])[0]
            where = f"history {error.history_id}" + (f", {error.exception_class}" if error.exception_class else "")
            lines.append(f"    last error: {error.finished_at} {error.outcome} ({where}): {text}")
    return lines


def health_figures(check: CheckHealth) -> str:
    rate = "-" if check.failure_rate is None else f"{check.failure_rate:.1%}"
    late = "-" if check.oldest_overdue_seconds is None else offset_text(check.oldest_overdue_seconds)
    pending = f"{'~' if check.pending_estimated else ''}{check.pending}"
    due = f"{'~' if check.due_estimated else ''}{check.due}"
    return (
        f"runs={check.runs} ({check.runs_per_minute:g}/min) failed runs={check.failed_runs} failure rate={rate} "
        f"finished={check.finished} failed={check.failed} run time p50={seconds(check.run_seconds_p50)} "
        f"p95={seconds(check.run_seconds_p95)} pending={pending} due={due} oldest overdue={late}"
    ) + (f" held={check.held} ({held_by(check.held_by)})" if check.held else "")


def held_by(counts: dict[str, int]) -> str:
    """``carrier=3 customer=1``: jobs held back per limit or rate."""
    return " ".join(f"{name}={count}" for name, count in sorted(counts.items()))


def seconds(value: float | None) -> str:
    """A run time: ``-``, ``0.012s``, ``2.5s``, ``1m40s``."""
    if value is None:
        return "-"
    return f"{value:.3g}s" if value < 60 else offset_text(value)
