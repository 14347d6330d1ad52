from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import CommandParser

from prescient.conf import setting
from prescient.runtime.tick import operator_signals, tick

from ._args import PrescientCommand, aware_datetime, batch_size, memory_cap


class Command(PrescientCommand):
    help = "Run every prescient job whose slot has come (catch-up included), then exit."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--now",
            type=aware_datetime,
            default=None,
            help="Process what is due at this time (ISO 8601 with offset); default: the database's time.",
        )
        parser.add_argument("--batch-size", type=batch_size, default=None, help="Jobs claimed per batch.")
        parser.add_argument(
            "--json", action="store_true",
            help="Print one JSON object: processed, the counts of the summary line, and stopped_by.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # The watchdog ends this process (status 3) if a check will not stop at its timeout.
        # The checks run in this process: CHILD_MEMORY_MB caps it as it caps a worker's child.
        # Ctrl-C or SIGTERM: the run in progress and the rest of its batch are handed back
        # uncharged, what ran is written, and the tick exits 128 + the signal's number.
        with memory_cap(setting("CHILD_MEMORY_MB")), operator_signals():
            summary = tick(options["now"], batch_size=options["batch_size"], watchdog=True)
        signum = summary.stopped_by
        if options["json"]:
            self.emit({**summary.fields(), "stopped_by": signal.Signals(signum).name if signum else None})
            if signum:
                raise SystemExit(128 + signum)
            return
        if signum:
            self.say(f"{summary.line()} (stopped by {signal.Signals(signum).name}: what had not run was handed back)")
            raise SystemExit(128 + signum)
        self.say(summary.line())
