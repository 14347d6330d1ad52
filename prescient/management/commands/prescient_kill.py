from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from prescient.engine.verbs import kill
from prescient.models import FutureJob
from prescient.states import Event

from ._select import Done, JobsCommand


class Command(JobsCommand):
    help = (
        "End jobs with outcome 'killed' and a reason: one by id, or those selected by workflow, entity, "
        "check or state. A job whose run is in flight ends when the run returns; its result is discarded."
    )
    examples = (
        'prescient_kill --id 17 --reason "customer left"',
        'prescient_kill --check shop.unshipped --state buried --reason "replaced by shop.late" --dry-run',
        'prescient_kill --entity shop.order:42 --reason "order deleted by hand" --json',
    )
    event = Event.KILL
    infinitive, past, ends_as = "kill", "Killed", "killed"
    missing_selection = (
        "the following arguments are required: --id (or select jobs with --workflow, --entity, --check or --state)"
    )

    def add_verb_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reason", required=True, help="Why: kept in each job's history row.")

    def check_options(self, options: dict[str, Any]) -> None:
        if not options["reason"].strip():
            raise CommandError("--reason must not be blank: say why the job is killed")

    def act(self, job: FutureJob, now: datetime, options: dict[str, Any]) -> str:
        return "changed" if kill(job.pk, options["reason"], now=now) == "ended" else "requested"

    def single_line(self, row: Done) -> str:
        if row.result == "changed":
            return f"Killed job {row.id}."
        return (
            f"Kill of job {row.id} requested: its run is in flight; "
            "the job ends killed when the run returns (its result is discarded)."
        )
