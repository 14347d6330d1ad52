"""``prescient_retry``: run finished jobs again (``prescient.rerun``), selected in the history."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import models
from django.utils import timezone

from prescient.engine import rerun
from prescient.exceptions import HistoryNotFound, PrescientError, RerunRefused
from prescient.models import JobHistory
from prescient.states import Outcome
from prescient.wording import entity_text

from ._args import Whole, aware_datetime, job_id
from ._select import ExamplesCommand, entity_arg, model_label

#: Rows run again by one call unless --limit says otherwise (newest first).
DEFAULT_LIMIT = 100


@dataclass
class Rerun:
    """What became of one history row: ``created`` (``job``: the new job's id), ``refused``
    (``detail``: why), or in a dry run ``would create`` / ``would be refused``."""

    id: int
    entity: str
    check: str
    outcome: str
    result: str
    job: int | None = None
    detail: str = ""


class Command(ExamplesCommand):
    help = (
        "Run finished jobs again (as prescient.rerun() does): a new live job for the same check and "
        "entity, due now, linked to the history row it came from. Rows are selected in the history "
        "(newest first); a row is refused, with why, while a live job of its check and entity exists."
    )
    examples = (
        "prescient_retry --id 1234",
        "prescient_retry --check shop.unshipped --outcome failed --since 2026-11-22T00:00:00Z --dry-run",
        "prescient_retry --entity shop.order:42 --outcome killed --json",
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--id", type=job_id, action="append", dest="ids", metavar="ID",
            help="A history row, by id (repeat for more).",
        )
        parser.add_argument("--check", help="The finished jobs of this check.")
        parser.add_argument(
            "--entity", type=entity_arg, metavar="LABEL:PK", help="The finished jobs of one entity, e.g. shop.order:42."
        )
        parser.add_argument("--workflow", help="The finished jobs of this workflow.")
        parser.add_argument("--outcome", choices=[o.value for o in Outcome], help="The jobs that ended so.")
        parser.add_argument("--since", type=aware_datetime, help="The jobs that ended at or after this time.")
        limit = Whole(1, 100_000)
        parser.add_argument(
            "--limit", type=limit, default=DEFAULT_LIMIT,
            help=f"Run at most this many rows again, the newest first ({limit.allowed}; default {DEFAULT_LIMIT}).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Say what would be created; create nothing.")
        parser.add_argument("--json", action="store_true", help="Print one JSON object (each row and the summary).")
        parser.add_argument(
            "--now", type=aware_datetime, default=None, help="Act as of this time (ISO 8601 with offset)."
        )

    def selected(self, options: dict[str, Any]) -> models.QuerySet[JobHistory]:
        found: dict[str, Any] = {}
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
        ids = options["ids"]
        if not found and not ids:
            raise CommandError("select finished jobs: give --id, --check, --entity, --workflow, --outcome or --since")
        queryset = JobHistory.objects.filter(**found)
        if ids:
            missing = sorted(set(ids) - set(JobHistory.objects.filter(pk__in=ids).values_list("pk", flat=True)))
            if missing:
                raise CommandError(str(HistoryNotFound(missing[0])))
            queryset = queryset.filter(pk__in=ids)
        return queryset.order_by("-finished_at", "-id")[: options["limit"]]

    def handle(self, *args: Any, **options: Any) -> None:
        now = options["now"] or timezone.now()
        ids = options["ids"] or []
        single = len(ids) == 1  # one row asked for: its refusal is the command's
        done: list[Rerun] = []
        planned: set[tuple[str, str, str]] = set()  # a dry run: the keys that would have a live job
        for row in self.selected(options):
            item = Rerun(row.pk, entity_text(row.entity_name, row.entity_key), row.job_exec, row.outcome, "")
            key = (row.entity_name, row.entity_key, row.job_exec)
            try:
                if options["dry_run"]:
                    if key in planned:
                        raise RerunRefused(row.pk, "a newer row of its check and entity, selected too, would be "
                                                   "run again first (one pending job per entity and check)")
                    rerun.preview(row, now)
                    planned.add(key)
                    item.result = "would create"
                else:
                    item.job, item.result = rerun.rerun(row, now=now).pk, "created"
            except PrescientError as exc:
                if single:
                    raise CommandError(str(exc)) from exc
                item.result = "refused" if not options["dry_run"] else "would be refused"
                item.detail = str(exc)
            done.append(item)
        self.report(done, options)

    def report(self, done: list[Rerun], options: dict[str, Any]) -> None:
        counts = Counter(item.result for item in done)
        if options["json"]:
            self.emit({
                "verb": "rerun", "dry_run": options["dry_run"], "rows": [asdict(item) for item in done],
                "summary": dict(counts),
            })
            return
        write = self.stdout.write if options["dry_run"] else self.say  # a dry run's lines are its answer
        for item in done:
            write(self.line(item))
        if options["dry_run"]:
            write(f"Would create {counts['would create']} job(s); {counts['would be refused']} refused; "
                  f"{len(done)} selected.")
        else:
            write(f"Created {counts['created']} job(s); {counts['refused']} refused; {len(done)} selected.")

    @staticmethod
    def line(item: Rerun) -> str:
        what = f"finished job {item.id} {item.check} {item.entity} ({item.outcome})"
        if item.result == "created":
            return f"{what}: run again as job {item.job}"
        if item.result == "would create":
            return f"{what}: would run again"
        return f"{what}: {item.result}: {item.detail}"
