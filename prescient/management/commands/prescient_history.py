"""``prescient_history``: list finished jobs (the history rows), newest first."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from prescient.models import JobHistory
from prescient.wording import entity_text

from ._args import row_limit
from ._history import HistoryCommand

#: Rows shown unless --limit says otherwise.
DEFAULT_LIMIT = 100
#: Characters of a row's last error shown on its line (the JSON has all of it).
ERROR_SHOWN = 120


def history_row(row: JobHistory) -> dict[str, Any]:
    """A history row as the command prints it (and as ``--json`` gives it)."""
    return {
        "id": row.pk, "job_id": row.job_id, "kind": row.kind, "check": row.job_exec,
        "entity": entity_text(row.entity_name, row.entity_key), "workflow": row.workflow, "outcome": row.outcome,
        "created_at": row.created_at.isoformat(), "finished_at": row.finished_at.isoformat(),
        "check_count": row.check_count, "run_count": row.run_count, "failure_count": row.failure_count,
        "total_run_seconds": row.total_run_seconds, "last_error": row.last_error,
        "exception_class": row.exception_class_path, "reason": row.reason, "rerun_of": row.rerun_of,
    }


def first_line(text: str, limit: int = ERROR_SHOWN) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Command(HistoryCommand):
    help = (
        "List finished jobs (the history rows), newest first: all, or those selected by id, the live "
        "job's id, check, entity, workflow, outcome, the time they ended or their error text."
    )
    examples = (
        "prescient_history --job-id 4242",
        "prescient_history --check shop.unshipped --outcome failed --since 2026-11-22T00:00:00Z",
        "prescient_history --error TimeoutError --limit 20 --json",
    )
    missing_selection = None  # no filter: the newest rows

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_selection_arguments(parser)
        parser.add_argument(
            "--limit", type=row_limit, default=DEFAULT_LIMIT,
            help=f"Show at most N rows, the newest first (default {DEFAULT_LIMIT}).",
        )
        parser.add_argument(
            "--json", action="store_true",
            help="Print one JSON object: rows (each with every field, the whole error), shown and selected.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queryset = self.selected(options)
        total = queryset.count()
        if not total:
            self.nothing_selected("No finished job", options)
        rows = [history_row(row) for row in queryset[: options["limit"]]]
        if options["json"]:
            self.emit({"rows": rows, "shown": len(rows), "selected": total})
            return
        write = self.stdout.write  # a listing is the answer asked for: printed at every verbosity
        for row in rows:
            extra = f" workflow={row['workflow']}" if row["workflow"] else ""
            if row["rerun_of"] is not None:
                extra += f" rerun_of={row['rerun_of']}"
            write(
                f"{row['id']}  {row['finished_at']}  {row['outcome']:<14} {row['check']}  {row['entity']}  "
                f"job={row['job_id']} checks={row['check_count']} runs={row['run_count']} "
                f"failures={row['failure_count']}{extra}"
            )
            for label, text in (("error", row["last_error"]), ("reason", row["reason"])):
                if text.strip():
                    write(f"    {label}: {first_line(text)}")
        write(f"{len(rows)} finished job(s) shown of {total} selected.")
