"""prescient_backfill: schedule a check for every existing row of its model (matching filters)."""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from typing import Any, cast

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import models
from django.db.models.functions import Cast

from prescient.checks import schedulable
from prescient.engine.verbs import schedule_many
from prescient.exceptions import PrescientError
from prescient.models import FutureJob

from ._args import PrescientCommand, aware_datetime, delay_seconds, rows_per_statement
from ._select import known_workflow


def field_filter(text: str) -> tuple[str, str]:
    """argparse type: ``field=value``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not field=value")
    return name.strip(), value


_TRUE, _FALSE = {"true", "t", "yes", "y", "1"}, {"false", "f", "no", "n", "0"}


class Progress:
    """A text progress bar on stderr: redrawn in place on a terminal, a line per tenth elsewhere."""

    def __init__(self, stream: Any, total: int, enabled: bool) -> None:
        self.stream, self.total, self.enabled = stream, total, enabled and total > 0
        self.tty = enabled and getattr(stream, "isatty", lambda: False)()
        self.last_drawn, self.last_tenth = 0.0, -1

    def __call__(self, done: int, created: int) -> None:
        if not self.enabled:
            return
        share = min(1.0, done / self.total)
        line = f"[{'#' * int(share * 30):<30}] {done:,}/{self.total:,} ({share:.0%}), {created:,} scheduled"
        if self.tty:
            if time.monotonic() - self.last_drawn >= 0.1 or done >= self.total:
                self.stream.write("\r" + line, ending="")
                self.stream.flush()
                self.last_drawn = time.monotonic()
        elif int(share * 10) > self.last_tenth:
            self.last_tenth = int(share * 10)
            self.stream.write(line)

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("")


class Command(PrescientCommand):
    help = (
        "Schedule a check for every row of its model that matches the filters (exact field=value "
        "pairs), for backfilling existing data. Rows that already have a pending job of the check "
        "keep it. The model must be the one the check is registered for."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model", help="The check's model, as app_label.ModelName (e.g. shop.Order).")
        parser.add_argument("check", help="The registered check's name (e.g. shop.unshipped).")
        parser.add_argument(
            "--filter", action="append", type=field_filter, default=[], dest="filters", metavar="FIELD=VALUE",
            help="Only rows whose field equals the value (repeat for several; all must match).",
        )
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--delay-seconds", type=delay_seconds, default=None, help="Due this many seconds from now.")
        when.add_argument("--at", type=aware_datetime, default=None, help="Due at this time (ISO 8601 with offset).")
        parser.add_argument("--workflow", default="", help="Put the jobs in this workflow (known, or --create).")
        parser.add_argument("--create", action="store_true", help="Make the workflow if nothing uses it yet.")
        parser.add_argument("--batch-size", type=rows_per_statement, default=1000, help="Rows written per statement.")
        parser.add_argument("--dry-run", action="store_true", help="Count what would be scheduled; write nothing.")
        parser.add_argument(
            "--json", action="store_true",
            help="Print one JSON object (the counts of the summary line); no progress bar.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["create"] and not options["workflow"]:
            raise CommandError("--create makes a workflow: give it with --workflow")
        if options["workflow"]:
            known_workflow(options["workflow"], create=options["create"])  # a typo must not make one
        try:
            entry = schedulable(options["check"])
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        label = options["model"].strip().lower()
        if entry.model_label is None:
            raise CommandError(f"Check {entry.name!r} names no model: it cannot be backfilled from a table.")
        if label != entry.model_label:
            raise CommandError(f"Check {entry.name!r} is about {entry.model_label}, not {options['model']}.")
        try:
            model = entry.model
        except LookupError as exc:
            raise CommandError(f"Model {entry.model_label} of check {entry.name!r} is not installed.") from exc
        assert model is not None
        rows = model._default_manager.filter(**self._lookups(model, options["filters"]))
        delay = None if options["delay_seconds"] is None else timedelta(seconds=options["delay_seconds"])
        total = rows.count()
        if options["dry_run"]:
            pending = FutureJob.objects.filter(
                entity_name=entry.model_label, job_exec=entry.name,
                entity_key__in=rows.annotate(_key=Cast("pk", models.CharField())).values("_key"),
            ).count()
            if options["json"]:
                self.emit({"dry_run": True, "check": entry.name, "matched": total,
                           "would_schedule": total - pending, "already_pending": pending})
                return
            self.stdout.write(
                f"prescient backfill (dry run): matched={total} would_schedule={total - pending} "
                f"already_pending={pending} check={entry.name}"
            )
            return
        progress = Progress(self.stderr, total, options["verbosity"] >= 1 and not options["json"])
        try:
            created = schedule_many(
                rows, entry, at=options["at"], delay=delay, workflow=options["workflow"],
                batch_size=options["batch_size"], progress=progress,
            )
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            progress.close()
        if options["json"]:
            self.emit({"dry_run": False, "check": entry.name, "matched": total, "scheduled": created,
                       "already_pending": total - created})
            return
        self.say(
            f"prescient backfill: matched={total} scheduled={created} already_pending={total - created} "
            f"check={entry.name}"
        )

    @staticmethod
    def _lookups(model: type[models.Model], filters: list[tuple[str, str]]) -> dict[str, Any]:
        """``field=value`` pairs as exact lookups on concrete fields, values converted by the field."""
        lookups: dict[str, Any] = {}
        for name, text in filters:
            field: models.Field[Any, Any] | models.ForeignObjectRel | None
            try:
                field = model._meta.get_field(name)
            except FieldDoesNotExist:
                field = next((f for f in model._meta.concrete_fields if f.attname == name), None)  # e.g. customer_id
            if not isinstance(field, models.Field) or not field.concrete or field.many_to_many:
                known = ", ".join(sorted({f.name for f in model._meta.concrete_fields}))
                raise CommandError(f"{model._meta.label} has no field {name!r} to filter on (fields: {known}).")
            # A concrete relation is a foreign key: filter on the value of the field it points to.
            target = cast("models.ForeignKey[Any, Any]", field).target_field if field.is_relation else field
            value: Any = text
            if isinstance(target, models.BooleanField):
                lowered = text.strip().lower()
                if lowered not in _TRUE | _FALSE:
                    raise CommandError(f"--filter {name}={text}: not a boolean (true/false)")
                value = lowered in _TRUE
            else:
                try:
                    value = target.to_python(text)
                except ValidationError as exc:
                    raise CommandError(f"--filter {name}={text}: {'; '.join(exc.messages)}") from exc
            key = field.attname if field.is_relation else field.name
            if key in lookups and lookups[key] != value:
                lookups[f"{key}__in"] = []  # two different exact values: nothing matches
            else:
                lookups[key] = value
        return lookups
