from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import models
from django.utils import timezone

from prescient.checks import schedulable
from prescient.engine.verbs import due_time, entity_ref, schedule_job
from prescient.exceptions import PrescientError
from prescient.models import FutureJob
from prescient.wording import entity_text

from ._args import aware_datetime, delay_seconds
from ._select import ExamplesCommand, entity_arg, known_workflow, model_label
from .prescient_jobs import job_row


def instance(label: str, key: str) -> models.Model:
    """The saved instance ``label:key``; CommandError if there is none."""
    model = apps.get_model(model_label(label))
    try:
        pk = model._meta.pk
        assert pk is not None
        found: models.Model = model._default_manager.get(pk=pk.to_python(key))
        return found
    except (model.DoesNotExist, ValidationError, ValueError):
        raise CommandError(f"No {model._meta.label_lower} with pk {key!r}") from None


class Command(ExamplesCommand):
    help = (
        "Schedule a check for one entity (as prescient.schedule() does): due at --at or after "
        "--delay-seconds (else now), rounded up to a slot. An entity that already has a pending job of "
        "the check keeps it, unless --replace moves its due time."
    )
    examples = (
        "prescient_schedule --check shop.unshipped --entity shop.order:42 --delay-seconds 10800",
        "prescient_schedule --check shop.charge --entity shop.order:42 --workflow order-42 --create",
        (
            "prescient_schedule --check shop.unshipped --entity shop.order:42 --at 2026-12-01T09:00:00Z "
            "--replace --dry-run"
        ),
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", required=True, help="The registered check's name (e.g. shop.unshipped).")
        parser.add_argument(
            "--entity", type=entity_arg, required=True, metavar="LABEL:PK", help="The entity, e.g. shop.order:42."
        )
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--at", type=aware_datetime, default=None, help="Due at this time (ISO 8601 with offset).")
        when.add_argument("--delay-seconds", type=delay_seconds, default=None, help="Due this many seconds from now.")
        parser.add_argument("--workflow", default="", help="Put the job in this workflow (known, or --create).")
        parser.add_argument("--create", action="store_true", help="Make the workflow if nothing uses it yet.")
        parser.add_argument("--replace", action="store_true", help="Move the due time of a pending job.")
        parser.add_argument("--dry-run", action="store_true", help="Say what would be scheduled; write nothing.")
        parser.add_argument("--json", action="store_true", help="Print the job as one JSON object.")
        parser.add_argument("--now", type=aware_datetime, default=None, help="As of this time (ISO 8601 with offset).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["create"] and not options["workflow"]:
            raise CommandError("--create makes a workflow: give it with --workflow")
        workflow = options["workflow"] and known_workflow(options["workflow"], create=options["create"])
        now = options["now"] or timezone.now()
        delay = None if options["delay_seconds"] is None else timedelta(seconds=options["delay_seconds"])
        try:
            entry = schedulable(options["check"])
            entity = instance(*options["entity"])
            name, key = entity_ref(entity, entry)
            if options["dry_run"]:
                due = due_time(entry, now, options["at"], delay)
                pending = FutureJob.objects.filter(entity_name=name, entity_key=key, job_exec=entry.name).first()
                self.dry_run(entry.name, entity_text(name, key), due.isoformat(), pending, options)
                return
            # --replace: the pending job's due time before, to say whether and from when it moved.
            before = (
                FutureJob.objects.filter(entity_name=name, entity_key=key, job_exec=entry.name)
                .values_list("next_check_at", flat=True).first()
                if options["replace"] else None
            )
            job, created = schedule_job(
                entity, entry, at=options["at"], delay=delay, workflow=workflow, replace=options["replace"], now=now
            )
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        row = job_row(job)
        moved_from = before if not created and before is not None and before != job.next_check_at else None
        result = "created" if created else "moved" if moved_from is not None else "kept"
        if options["json"]:
            self.emit({
                **row, "created": created, "result": result,
                "moved_from": None if moved_from is None else moved_from.isoformat(),
            })
        elif created:
            self.say(f"Scheduled job {job.pk}: {job.job_exec} {row['entity']}, due {row['next_check_at']} "
                     f"({job.state}).")
        elif moved_from is not None:
            self.say(f"Moved job {job.pk} ({job.job_exec} {row['entity']}) from {moved_from.isoformat()} to "
                     f"{row['next_check_at']}.")
        else:
            unmoved = " (--replace: already due then, not moved)" if options["replace"] else ""
            self.say(f"Job {job.pk} was already pending: {job.job_exec} {row['entity']}, due {row['next_check_at']}"
                     f"{unmoved}.")

    def dry_run(self, check: str, entity: str, due: str, pending: FutureJob | None, options: dict[str, Any]) -> None:
        if pending is None:
            outcome, text = "would create", f"Would schedule {check} {entity}, due {due}."
        elif options["replace"] and options["workflow"] and pending.workflow != options["workflow"]:
            outcome = "would refuse"
            text = (f"Job {pending.pk} ({check} {entity}) is in workflow {pending.workflow!r}: --replace moves its "
                    "due time, never its workflow; nothing would change.")
        elif options["replace"] and pending.next_check_at.isoformat() != due:
            outcome, text = "would move", f"Would move job {pending.pk} ({check} {entity}) to {due}."
        else:
            outcome = "would keep"
            text = f"Job {pending.pk} is already pending ({check} {entity}): nothing would change."
        if options["json"]:
            self.emit({"check": check, "entity": entity, "due": due, "result": outcome,
                       "id": None if pending is None else pending.pk})
        else:
            self.stdout.write(text)  # the answer asked for: at every verbosity
