from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from prescient.engine.decisions import RESCUED
from prescient.maintenance.rescuer import rescue

from ._args import PrescientCommand, aware_datetime


class Command(PrescientCommand):
    help = (
        "Deal with the claims whose lease went stale, as every tick and worker does first: a lost "
        "worker's run is reclaimed (a failed run, due again at once), a claim never started is "
        "handed back, a dead tick's run is buried for a person to decide (run it now or kill it), "
        "and a job slept, killed or cancelled during the lost run is slept or ended as asked. "
        "Staleness is judged by the database's clock. Prints how many of each."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--now",
            type=aware_datetime,
            default=None,
            help=(
                "Date what is written (the 'worker lost' errors, history rows) as this time (ISO 8601 with "
                "offset); default: now. Staleness is judged by the database's clock whatever this says, so a "
                "time in the future takes no live claim away."
            ),
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object: how many of each.")

    def handle(self, *args: Any, **options: Any) -> None:
        done = rescue(options["now"] or timezone.now())
        if options["json"]:
            self.emit({word: done.get(word, 0) for word in RESCUED})
            return
        self.say("prescient reap: " + " ".join(f"{word}={done.get(word, 0)}" for word in RESCUED))
