"""The shared shape of prescient_pause and prescient_release: a workflow or one job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, CommandParser

from prescient.exceptions import PrescientError

from ._args import PrescientCommand, positive_int


class SteerCommand(PrescientCommand):
    """Calls ``verb(workflow=…, job=…)`` and reports the count in ``past`` tense."""

    verb: Callable[..., int]
    past = ""  # "Paused" / "Released"
    unchanged = ""  # what to say when one job needed no change
    workflow_help = ""
    job_help = ""
    can_create = False  # whether --create may make a new workflow (pause: jobs scheduled into it start paused)

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--workflow", help=self.workflow_help)
        which.add_argument("--id", type=positive_int, dest="job_id", metavar="ID", help=self.job_help)
        if self.can_create:
            parser.add_argument(
                "--create", action="store_true",
                help="Make the workflow if no job or schedule uses it yet (else an unknown name is an error).",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        workflow, job_id = options["workflow"], options["job_id"]
        if workflow is not None and not workflow.strip():
            raise CommandError("--workflow needs a name")
        extra: dict[str, Any] = {}
        if self.can_create:
            if options["create"] and workflow is None:
                raise CommandError("--create makes a workflow: give it with --workflow")
            extra["create_workflow"] = options["create"]
        try:
            count = type(self).verb(workflow=workflow, job=job_id, **extra)
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        if workflow is not None:
            self.say(f"{self.past} workflow {workflow!r}: {count} job(s) {self.past.lower()}.")
        elif count:
            self.say(f"{self.past} job {job_id}.")
        else:
            self.say(f"Job {job_id} {self.unchanged}.")
