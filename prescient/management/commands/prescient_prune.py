from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from prescient.clock import db_now
from prescient.maintenance.history_pruner import BATCH_SIZE, expired, prune_all, retention

from ._args import PrescientCommand, aware_datetime, rows_per_statement


class Command(PrescientCommand):
    help = (
        "Delete the job history kept longer than PRESCIENT['HISTORY_RETENTION_DAYS'] allows, in short "
        "batches, as the upkeep of workers and ticks does a little at a time (each batch takes their lock: it "
        "waits for a batch of theirs to end, and their passes stop at one of its batches); prints what it removed "
        "per outcome."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Count the expired rows per outcome; delete nothing."
        )
        parser.add_argument(
            "--now",
            type=aware_datetime,
            default=None,
            help="Judge expiry as if it were this time (ISO 8601 with offset); default: the database's time.",
        )
        parser.add_argument(
            "--batch-size",
            type=rows_per_statement,
            default=None,
            help=f"Rows deleted per statement, each its own short transaction (default: {BATCH_SIZE}).",
        )
        parser.add_argument(
            "--json", action="store_true",
            help="Print one JSON object: per outcome the rows removed, the days kept and the cut-off; the total; "
            "the history partitions dropped whole (PostgreSQL).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = options["now"] or db_now()
        dry_run = options["dry_run"]
        done = expired(now) if dry_run else prune_all(now, batch_size=options["batch_size"])
        days = retention()
        if options["json"]:
            self.emit({
                "dry_run": dry_run, "total": done.total, "partitions_dropped": done.dropped,
                "outcomes": {
                    outcome: {
                        "kept_days": kept, "removed": done.removed.get(outcome, 0),
                        "cutoff": None if kept is None else done.cutoffs[outcome].isoformat(),
                    }
                    for outcome, kept in days.items()
                },
            })
            return
        if options["verbosity"] < 1:
            return
        verb = "would remove" if dry_run else "removed"
        for outcome, kept in days.items():
            if kept is None:
                self.stdout.write(f"  {outcome}: kept forever")
                continue
            cutoff, unit = done.cutoffs[outcome].isoformat(), "day" if kept == 1 else "days"
            removed = done.removed.get(outcome, 0)
            self.stdout.write(f"  {outcome}: {verb} {removed} (kept {kept} {unit}: finished before {cutoff})")
        if done.dropped:
            if dry_run:
                self.stdout.write(f"  history partitions it would drop whole: {', '.join(done.dropped)}")
            else:
                each = ", ".join(f"{name} (about {rows:,} rows)" for name, rows in done.dropped.items())
                self.stdout.write(f"  history partitions dropped whole: {each}")
        if not done.complete:
            self.stdout.write("  a history partition was busy (its lock not granted in time): run it again")
        self.stdout.write(f"prescient prune{' (dry run)' if dry_run else ''}: {verb} {done.total} history row(s)")
