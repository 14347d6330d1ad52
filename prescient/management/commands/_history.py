"""The shared selection of the commands on finished jobs (history rows): ``prescient_history``
lists them, ``prescient_retry`` runs them again. Rows are chosen by id, the live job's id, check,
entity, workflow, outcome, the time they ended and their error text; newest first."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import models

from prescient.exceptions import HistoryNotFound
from prescient.models import JobHistory
from prescient.states import Outcome

from ._args import aware_datetime, job_id
from ._select import ExamplesCommand, add_strict, entity_arg, model_label


class HistoryCommand(ExamplesCommand):
    """A command on history rows: the selecting options, and the rows they select."""

    #: Said when no row is selected at all (None: every row, as a listing does).
    missing_selection: str | None = (
        "select finished jobs: give --id, --job-id, --check, --entity, --workflow, --outcome, --since or --error"
    )

    def add_selection_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--id", type=job_id, action="append", dest="ids", metavar="ID",
            help="A history row, by id (repeat for more).",
        )
        parser.add_argument(
            "--job-id", type=job_id, default=None, metavar="ID",
            help="The row of the live job that had this id (what 'No live job with id …' points at).",
        )
        parser.add_argument("--check", help="The finished jobs of this check.")
        parser.add_argument(
            "--entity", type=entity_arg, metavar="LABEL:PK", help="The finished jobs of one entity, e.g. shop.order:42."
        )
        parser.add_argument("--workflow", help="The finished jobs of this workflow.")
        parser.add_argument("--outcome", choices=[o.value for o in Outcome], help="The jobs that ended so.")
        parser.add_argument("--since", type=aware_datetime, help="The jobs that ended at or after this time.")
        parser.add_argument(
            "--error", metavar="TEXT",
            help="The jobs whose last error or exception class contains this text (any case).",
        )
        add_strict(parser)

    def selected(self, options: dict[str, Any]) -> models.QuerySet[JobHistory]:
        """The selected rows, newest first (not cut to ``--limit``)."""
        found: dict[str, Any] = {}
        if options["job_id"] is not None:
            found["job_id"] = options["job_id"]
        if options["check"] is not None:
            found["job_exec"] = options["check"]
        if options["entity"] is not None:
            label, key = options["entity"]
            found["entity_name"], found["entity_key"] = model_label(label), key
        if options["workflow"] is not None:
            found["workflow"] = options["workflow"]
        if options["outcome"] is not None:
            found["outcome"] = options["outcome"]
        if options["since"] is not None:
            found["finished_at__gte"] = options["since"]
        ids, error = options["ids"], options["error"]
        if not found and not ids and error is None and self.missing_selection is not None:
            raise CommandError(self.missing_selection)
        queryset = JobHistory.objects.filter(**found)
        if error is not None:
            if not error.strip():
                raise CommandError("--error needs some text to look for")
            queryset = queryset.filter(
                models.Q(last_error__icontains=error) | models.Q(exception_class_path__icontains=error)
            )
        if ids:
            missing = sorted(set(ids) - set(JobHistory.objects.filter(pk__in=ids).values_list("pk", flat=True)))
            if missing:
                raise CommandError(str(HistoryNotFound(missing[0])))
            queryset = queryset.filter(pk__in=ids)
        return queryset.order_by("-finished_at", "-id")
