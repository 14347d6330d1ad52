from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from prescient.exceptions import PrescientError
from prescient.services import release

from ._args import positive_int


class Command(BaseCommand):
    help = (
        "Release a paused workflow or job: each paused job returns to its last state "
        "(scheduled, or running if its run is still in flight)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--workflow", help="Release this workflow and every paused job of it.")
        which.add_argument("--id", type=positive_int, dest="job_id", metavar="ID", help="Release one job, by id.")

    def handle(self, *args: Any, **options: Any) -> None:
        workflow, job_id = options["workflow"], options["job_id"]
        if workflow is not None and not workflow.strip():
            raise CommandError("--workflow needs a name")
        try:
            count = release(workflow=workflow, job=job_id)
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        if workflow is not None:
            self.stdout.write(f"Released workflow {workflow!r}: {count} job(s) released.")
        elif count:
            self.stdout.write(f"Released job {job_id}.")
        else:
            self.stdout.write(f"Job {job_id} was not paused.")
