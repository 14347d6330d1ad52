"""``prescient_retry``: run finished jobs again (``prescient.rerun``), selected in the history."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from prescient.engine import rerun
from prescient.exceptions import PrescientError, RerunRefused
from prescient.wording import entity_text

from ._args import Whole, aware_datetime
from ._history import HistoryCommand

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


class Command(HistoryCommand):
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
        self.add_selection_arguments(parser)
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

    def handle(self, *args: Any, **options: Any) -> None:
        now = options["now"] or timezone.now()
        ids = options["ids"] or []
        single = len(ids) == 1  # one row asked for: its refusal is the command's
        done: list[Rerun] = []
        planned: set[tuple[str, str, str]] = set()  # a dry run: the keys that would have a live job
        for row in self.selected(options)[: options["limit"]]:
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
        if not done:
            self.nothing_selected("No finished job", options, "nothing to run again")
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
