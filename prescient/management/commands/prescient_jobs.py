from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from prescient import limits
from prescient.clock import db_now
from prescient.models import FutureJob
from prescient.wording import entity_text

from ._args import row_limit
from ._select import JobsCommand


def job_row(job: FutureJob, held_by: str = "") -> dict[str, Any]:
    """A live job as the command prints it (and as ``--json`` gives it)."""
    row = {
        "id": job.pk, "entity": entity_text(job.entity_name, job.entity_key), "check": job.job_exec, "state": job.state,
        "last_state": job.last_state, "next_check_at": job.next_check_at.isoformat(), "workflow": job.workflow,
        "check_count": job.check_count, "in_flight": job.in_flight,
    }
    if held_by:
        row["held_by"] = held_by
    return row


class Command(JobsCommand):
    help = "List live jobs, oldest id first: all, or those selected by id, entity, check, workflow or state."
    examples = (
        "prescient_jobs --entity shop.order:42",
        "prescient_jobs --state buried",
        "prescient_jobs --check shop.unshipped --workflow order-42 --json",
    )
    acts = False
    missing_selection = ""

    def add_verb_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=row_limit, default=100, help="Show at most N jobs (default 100).")
        parser.add_argument("--json", action="store_true", help="Print one JSON object per job.")

    def handle(self, *args: Any, **options: Any) -> None:
        filters = self.filters(options)
        queryset = FutureJob.objects.filter(**filters).order_by("pk")
        if options["ids"]:
            queryset = queryset.filter(pk__in=options["ids"])
        total = queryset.count()
        if not total:
            self.nothing_selected("No live job", options)
        shown = list(queryset[: options["limit"]])
        clock = db_now() if limits.declared() else None
        held = limits.holding(shown, clock, clock) if clock is not None else {}
        for job in shown:
            row = job_row(job, held.get(job.pk, ""))
            if options["json"]:
                self.emit(row)
                continue
            extra = f" workflow={job.workflow}" if job.workflow else ""
            if job.pk in held:
                extra += f" ({held[job.pk]})"
            self.stdout.write(
                f"{job.pk}  {job.state:<9}  {job.job_exec}  {row['entity']}  next {row['next_check_at']}  "
                f"checks={job.check_count}{extra}"
            )
        if not options["json"]:
            self.stdout.write(f"{len(shown)} job(s) shown of {total} selected.")
