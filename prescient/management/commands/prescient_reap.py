from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from prescient.maintenance.rescuer import rescue

from ._args import PrescientCommand, aware_datetime


class Command(PrescientCommand):
    help = (
        "Bury jobs whose reservation went stale (their worker is presumed lost), as every tick "
        "does first. A person then runs them now or kills them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--now",
            type=aware_datetime,
            default=None,
            help="Judge staleness as if it were this time (ISO 8601 with offset); default: the real time.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        count = rescue(options["now"] or timezone.now())
        self.say(f"prescient reap: buried={count}")
