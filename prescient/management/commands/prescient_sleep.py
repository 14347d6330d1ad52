from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser

from prescient.engine.verbs import sleep
from prescient.models import FutureJob
from prescient.states import Event

from ._args import aware_datetime
from ._select import JobsCommand


class Command(JobsCommand):
    help = (
        "Move jobs' next check to a time (rounded up to a slot); a paused job stays paused. A job whose "
        "run is in flight is asked to stop, and is due at that time when the run returns."
    )
    examples = (
        "prescient_sleep --id 17 --until 2026-12-01T09:00:00+00:00",
        "prescient_sleep --check shop.unshipped --state scheduled --until 2026-12-01T09:00:00Z --dry-run",
    )
    event = Event.SLEEP
    infinitive, past = "sleep", "Slept"

    def add_verb_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--until", type=aware_datetime, required=True, metavar="ISO",
            help="The new time of their next check (ISO 8601 with offset).",
        )

    def preview(self, job: FutureJob, options: dict[str, Any]) -> str:
        return f"{super().preview(job, options)} until {options['until'].isoformat()}"

    def act(self, job: FutureJob, now: datetime, options: dict[str, Any]) -> str:
        slept = sleep(job.pk, options["until"], now=now)
        return "requested" if slept.in_flight else "changed"
