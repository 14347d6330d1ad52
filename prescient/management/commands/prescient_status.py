from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from prescient.status import snapshot
from prescient.wording import offset_text

from ._args import PrescientCommand, aware_datetime

#: Seconds of clock skew between a worker's host and the database above which status warns.
CLOCK_SKEW_WARNING = 1.0


class Command(PrescientCommand):
    help = "Show counts per state, jobs due now, lateness, live workers and the last slot processed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")
        parser.add_argument("--now", type=aware_datetime, default=None, help="As of this time (ISO 8601 with offset).")

    def handle(self, *args: Any, **options: Any) -> None:
        status = snapshot(options["now"])
        if options["json"]:
            self.stdout.write(json.dumps(status.as_dict(), sort_keys=True))
            return
        write = self.stdout.write
        write("jobs:    " + "  ".join(f"{state}={count}" for state, count in status.states.items()))
        held = "  ".join(f"{name}={count}" for name, count in sorted(status.held.items()))
        write(f"due now: {status.due_now}" + (f" (held back by limits: {held})" if held else ""))
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
        for e in status.expectations:
            ladder = ", ".join(offset_text(seconds) for seconds in e.ladder_seconds)
            calendar = f" calendar={e.calendar}" if e.calendar else ""
            write(
                f"  {e.name}  model={e.model} ladder=[{ladder}]{calendar} "
                f"pending={e.pending} met={e.met} missed={e.missed}"
            )
        for w in status.workers:
            if abs(w.clock_skew_seconds) > CLOCK_SKEW_WARNING:
                self.stderr.write(self.style.WARNING(
                    f"warning: the clock of {w.hostname} (worker {w.name}) is {w.clock_skew_seconds:+.1f}s off the "
                    "database's; prescient judges time by the database, but fix the host's clock (NTP)"
                ))
