"""The shared shape of prescient_pause and prescient_release: a whole workflow (the workflow
itself is paused: jobs scheduled into it later start paused), one job, or selected jobs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from prescient.exceptions import PrescientError
from prescient.models import FutureJob

from ._select import Done, JobsCommand, known_workflow


class SteerCommand(JobsCommand):
    """``--workflow`` alone steers the workflow; otherwise each selected job."""

    unchanged = ""  # what to say when one job needed no change
    can_create = False  # whether --create may make a new workflow (pause: its jobs start paused)
    missing_selection = (
        "one of the arguments --workflow --id is required (or select jobs with --entity, --check or --state)"
    )

    def add_verb_arguments(self, parser: CommandParser) -> None:
        if self.can_create:
            parser.add_argument(
                "--create", action="store_true",
                help="Make the workflow if no job or schedule uses it yet (else an unknown name is an error).",
            )

    def workflow_verb(self, name: str, options: dict[str, Any]) -> int:
        raise NotImplementedError

    def job_verb(self, job_id: int, options: dict[str, Any]) -> int:
        raise NotImplementedError

    def check_options(self, options: dict[str, Any]) -> None:
        if self.can_create and options["create"] and options["workflow"] is None:
            raise CommandError("--create makes a workflow: give it with --workflow")

    def act(self, job: FutureJob, now: datetime, options: dict[str, Any]) -> str:
        return "changed" if self.job_verb(job.pk, {**options, "now": now}) else "unchanged"

    def handle(self, *args: Any, **options: Any) -> None:
        workflow = options["workflow"]
        whole = workflow is not None and all(options[k] is None for k in ("entity", "check", "state"))
        if not whole or options["dry_run"]:  # a dry run lists the jobs that would change
            return super().handle(*args, **options)
        self.check_options(options)
        known_workflow(workflow, create=self.can_create and options["create"])
        try:
            count = self.workflow_verb(workflow, options)
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.emit({"workflow": workflow, "paused": self.infinitive == "pause", "changed": count})
        else:
            self.say(f"{self.past} workflow {workflow!r}: {count} job(s) {self.past.lower()}.")

    def filters(self, options: dict[str, Any]) -> dict[str, Any]:
        if options["workflow"] is not None and self.can_create and options["create"]:
            found = super().filters({**options, "workflow": None})
            return {**found, "workflow": known_workflow(options["workflow"], create=True)}
        return super().filters(options)

    def single_line(self, row: Done) -> str:
        if row.result == "changed":
            return f"{self.past} job {row.id}."
        return f"Job {row.id} {self.unchanged}."
