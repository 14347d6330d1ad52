from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from prescient import cron
from prescient.engine import recurring
from prescient.exceptions import PrescientError
from prescient.models import Schedule
from prescient.wording import entity_text

from ._args import aware_datetime
from ._select import ExamplesCommand


def timing(schedule: Schedule) -> str:
    """The schedule's expression and zone in words: ``every Monday at 09:00, America/New_York``."""
    return cron.in_words(schedule.cron, schedule.every_seconds, schedule.timezone)


class Command(ExamplesCommand):
    help = (
        "List the recurring schedules with their next occurrence, or pause / resume some by name. A paused "
        "schedule produces nothing and counts nothing missed; resumed, it runs from its next occurrence."
    )
    examples = (
        "prescient_schedules",
        "prescient_schedules --json",
        "prescient_schedules --pause billing.remind-42 --pause billing.remind-43",
        "prescient_schedules --resume billing.remind-42 --dry-run",
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object per line.")
        for verb in ("pause", "resume"):
            parser.add_argument(
                f"--{verb}", action="append", default=[], metavar="NAME",
                help=f"{verb.capitalize()} this schedule (repeat for more).",
            )
        parser.add_argument("--dry-run", action="store_true", help="With --pause/--resume: say what would change.")
        parser.add_argument("--now", type=aware_datetime, default=None, help="Act as of this time (ISO 8601, offset).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["pause"] or options["resume"]:
            self.steer(options)
        elif options["dry_run"]:
            raise CommandError("--dry-run goes with --pause or --resume")
        else:
            self.list(options["json"])

    def steer(self, options: dict[str, Any]) -> None:
        both = set(options["pause"]) & set(options["resume"])
        if both:
            raise CommandError(f"Schedule {sorted(both)[0]!r} is both paused and resumed: give it once")
        now = options["now"] or timezone.now()
        asked = [("pause", name) for name in options["pause"]] + [("resume", name) for name in options["resume"]]
        rows = {s.name: s for s in Schedule.objects.filter(name__in=[name for _, name in asked])}
        for _, name in asked:  # every name checked before anything changes
            if name not in rows:
                known = Schedule.objects.values_list("name", flat=True)[:10_000]
                raise CommandError(str(recurring.ScheduleNotFound(name, known)))
        write = self.stdout.write if options["dry_run"] else self.say  # a dry run's answer: every verbosity
        changed = 0
        for verb, name in asked:
            paused_now = rows[name].is_paused
            would = paused_now != (verb == "pause")
            if options["dry_run"]:
                done = would
            else:
                try:
                    done = (recurring.pause if verb == "pause" else recurring.resume)(name, now=now)
                except PrescientError as exc:
                    raise CommandError(str(exc)) from exc
            changed += bool(done)
            word = {"pause": "paused", "resume": "resumed"}[verb]
            if options["json"]:
                self.emit({"name": name, "verb": verb, "changed": bool(done), "dry_run": options["dry_run"]})
            elif done:
                write(f"{name}: {'would be ' if options['dry_run'] else ''}{word}")
            else:
                write(f"{name}: already {'paused' if paused_now else 'running'}, unchanged")
        if not options["json"]:
            head = "Would change" if options["dry_run"] else "Changed"
            write(f"{head} {changed} schedule(s); {len(asked) - changed} unchanged.")

    def list(self, as_json: bool) -> None:
        for s in Schedule.objects.order_by("name"):
            entity = entity_text(s.entity_name, s.entity_key) if s.entity_key else ""
            row = {
                "name": s.name, "starts": s.job_exec, "entity": entity,
                "when": timing(s), "next_at": s.next_at.isoformat(), "paused": s.is_paused,
                "runs": s.runs, "skipped": s.skipped, "missed": s.missed,
            }
            if as_json:
                self.emit(row)
                continue
            state = " (paused)" if s.is_paused else ""
            self.stdout.write(
                f"{s.name}{state}: {s.job_exec} {row['entity']} · {row['when']} · next {row['next_at']} · "
                f"runs={s.runs} skipped={s.skipped} missed={s.missed}"
            )
