from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from prescient import cron
from prescient.models import Schedule

from ._args import PrescientCommand


def timing(schedule: Schedule) -> str:
    """The schedule's expression and zone in words: ``every Monday at 09:00, America/New_York``."""
    return cron.in_words(schedule.cron, schedule.every_seconds, schedule.timezone)


class Command(PrescientCommand):
    help = "List the recurring schedules with their next occurrence."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object per line.")

    def handle(self, *args: Any, **options: Any) -> None:
        for s in Schedule.objects.order_by("name"):
            entity = f"{s.entity_name}#{s.entity_key}" if s.entity_key else ""
            row = {
                "name": s.name, "starts": s.job_exec, "entity": entity,
                "when": timing(s), "next_at": s.next_at.isoformat(), "paused": s.is_paused,
                "runs": s.runs, "skipped": s.skipped, "missed": s.missed,
            }
            if options["json"]:
                self.stdout.write(json.dumps(row, sort_keys=True))
                continue
            state = " (paused)" if s.is_paused else ""
            self.stdout.write(
                f"{s.name}{state}: {s.job_exec} {row['entity']} · {row['when']} · next {row['next_at']} · "
                f"runs={s.runs} skipped={s.skipped} missed={s.missed}"
            )
