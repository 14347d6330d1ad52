from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from prescient.engine.verbs import kill
from prescient.exceptions import PrescientError

from ._args import PrescientCommand, positive_int


class Command(PrescientCommand):
    help = (
        "End a job with outcome 'killed' and a reason. A job whose run is in flight ends when "
        "the run returns; its result is discarded."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--id", type=positive_int, dest="job_id", metavar="ID", required=True, help="The job to kill."
        )
        parser.add_argument("--reason", required=True, help="Why: kept in the job's history row.")

    def handle(self, *args: Any, **options: Any) -> None:
        job_id, reason = options["job_id"], options["reason"]
        if not reason or not reason.strip():
            raise CommandError("--reason must not be blank: say why the job is killed")
        try:
            result = kill(job_id, reason)
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        if result == "ended":
            self.say(f"Killed job {job_id}.")
        else:
            self.say(
                f"Kill of job {job_id} requested: its run is in flight; "
                "the job ends killed when the run returns (its result is discarded)."
            )
