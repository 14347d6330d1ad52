from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from prescient.exceptions import PrescientError
from prescient.services import pause

from ._args import positive_int


class Command(BaseCommand):
    help = (
        "Pause a workflow (its jobs stop being started; runs in flight go on) or one job. "
        "Undo with prescient_release."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--workflow", help="Pause every job of this workflow, and new ones scheduled into it.")
        which.add_argument("--id", type=positive_int, dest="job_id", metavar="ID", help="Pause one job, by id.")

    def handle(self, *args: Any, **options: Any) -> None:
        workflow, job_id = options["workflow"], options["job_id"]
        if workflow is not None and not workflow.strip():
            raise CommandError("--workflow needs a name")
        try:
            count = pause(workflow=workflow, job=job_id)
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        if workflow is not None:
            self.stdout.write(f"Paused workflow {workflow!r}: {count} job(s) paused.")
        elif count:
            self.stdout.write(f"Paused job {job_id}.")
        else:
            self.stdout.write(f"Job {job_id} was already paused.")
