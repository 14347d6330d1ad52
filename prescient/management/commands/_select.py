"""The shared shape of the commands that act on jobs: which jobs (``--id``, ``--entity``,
``--check``, ``--workflow``, ``--state``), ``--dry-run``, ``--json``, examples in ``--help``,
one line per job and a summary line at the end.

A command names its verb's event (for the dry run, read from the transition table) and says
what it does to one job (:meth:`JobsCommand.act`); the rest is here.
"""

from __future__ import annotations

import argparse
import shlex
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core.management.base import CommandError, CommandParser, DjangoHelpFormatter
from django.db import models
from django.utils import timezone

from prescient import states
from prescient.checks import get_check
from prescient.engine import store, workflows
from prescient.exceptions import JobNotFound, PrescientError, UnknownCheck, closest, did_you_mean
from prescient.models import FutureJob
from prescient.states import State
from prescient.wording import entity_text, parse_entity

from ._args import PrescientCommand, aware_datetime, job_id


def not_found(job_id: object) -> CommandError:
    """A live job that is not there: the error points at the command that lists finished jobs."""
    return CommandError(
        f"No live job with id {job_id!r}; it may have finished: "
        f"see python manage.py prescient_history --job-id {job_id}"
    )


def refusal(exc: PrescientError) -> CommandError:
    """The command's error for ``exc`` (a job not found points at ``prescient_history``)."""
    return not_found(exc.job_id) if isinstance(exc, JobNotFound) else CommandError(str(exc))


def entity_arg(text: str) -> tuple[str, str]:
    """argparse type: ``app_label.model:pk`` (e.g. ``shop.order:42``; ``shop.order#42``, as
    versions before 0.4 printed it, is read too)."""
    parsed = parse_entity(text)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not app_label.model:pk (e.g. shop.order:42)")
    return parsed


def model_label(label: str) -> str:
    """The lower-case label of an installed model; CommandError naming the closest otherwise."""
    try:
        return str(apps.get_model(label)._meta.label_lower)
    except (LookupError, ValueError):
        known = [m._meta.label_lower for m in apps.get_models()]
        raise CommandError(f"Unknown model {label!r}.{did_you_mean(closest(label.lower(), known))}") from None


def check_name(name: str) -> str:
    """A registered check's name, or one live jobs still carry (its code may be gone)."""
    try:
        return get_check(name).name
    except UnknownCheck as exc:
        if FutureJob.objects.filter(job_exec=name).exists():
            return name
        live = FutureJob.objects.values_list("job_exec", flat=True).distinct()[:10_000]
        raise CommandError(str(UnknownCheck(name, [*exc.suggestions, *live]))) from None


def known_workflow(name: str, *, create: bool = False) -> str:
    """``name`` if it is a workflow in use (or ``create``); CommandError naming the closest otherwise."""
    if not name.strip():
        raise CommandError("--workflow needs a name")
    if not create:
        try:
            workflows.require(name)
        except PrescientError as exc:
            raise CommandError(str(exc)) from exc
    return name


def selection_text(options: dict[str, Any]) -> str:
    """The selection as it was given on the command line: ``--check shop.unshipped --state buried``."""
    parts = [f"--id {pk}" for pk in options.get("ids") or []]
    for key in ("job_id", "workflow", "entity", "check", "state", "outcome", "since", "error"):
        value = options.get(key)
        if value is None:
            continue
        if key == "entity":
            value = ":".join(value)
        elif key == "since":
            value = value.isoformat()
        parts.append(f"--{key.replace('_', '-')} {shlex.quote(str(value))}")
    return " ".join(parts)


def add_strict(parser: CommandParser) -> None:
    parser.add_argument(
        "--strict", action="store_true",
        help="Exit with status 1 when the selection matches nothing (without it: a note on stderr, status 0).",
    )


class HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's option order, with the examples' lines kept as written."""


class ExamplesCommand(PrescientCommand):
    """A command whose ``--help`` ends with ``examples`` (lines of ``manage.py …``)."""

    examples: tuple[str, ...] = ()

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        if self.examples:
            kwargs.setdefault("formatter_class", HelpFormatter)
            kwargs.setdefault(
                "epilog", "examples:\n" + "\n".join(f"  python manage.py {line}" for line in self.examples)
            )
        return super().create_parser(prog_name, subcommand, **kwargs)

    def nothing_selected(self, what: str, options: dict[str, Any], consequence: str = "") -> None:
        """Say that the selection matched nothing (``what``: "No live job"): on stderr (not at
        ``-v 0``), or, with ``--strict``, as the command's error (exit status 1)."""
        given = selection_text(options)
        text = f"{what} matches {given}" if given else f"{what} matches (no filter given)"
        text += f": {consequence}." if consequence else "."
        if options.get("strict"):
            raise CommandError(text)
        if self.verbosity >= 1:
            self.stderr.write(text)


@dataclass
class Done:
    """What a verb did (or, in a dry run, would do) to one job."""

    id: int
    entity: str
    check: str
    workflow: str
    state: str
    to: str  # the state it moves to, or the outcome it ends with; "" when refused
    result: str  # changed / unchanged / requested / refused / would change / would not change
    detail: str = ""


class JobsCommand(ExamplesCommand):
    """Applies a verb to each selected job; with ``--dry-run`` only says what would change."""

    event = ""  # the transition table's event of the verb, e.g. Event.PAUSE
    infinitive = ""  # "pause": the summary says "Paused 3 job(s)" / "Would pause 3 job(s)"
    past = ""
    ends_as = ""  # for a verb that ends jobs: the outcome ("killed")
    acts = True  # False for a command that only lists the jobs (no --dry-run, no --now)
    #: Said when no job is selected at all (commands that took one way of selecting keep its words).
    missing_selection = "select jobs: give --id, --workflow, --entity, --check or --state"

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            "--id", type=job_id, action="append", dest="ids", metavar="ID",
            help="A job, by id (repeat for more).",
        )
        which.add_argument("--workflow", help="The jobs of this workflow.")
        parser.add_argument(
            "--entity", type=entity_arg, metavar="LABEL:PK", help="The jobs of one entity, e.g. shop.order:42."
        )
        parser.add_argument("--check", help="The jobs of this check.")
        parser.add_argument("--state", choices=[s.value for s in State], help="The jobs in this state.")
        self.add_verb_arguments(parser)
        add_strict(parser)
        if self.acts:
            parser.add_argument("--dry-run", action="store_true", help="Say what would change; change nothing.")
            parser.add_argument(
                "--json", action="store_true", help="Print one JSON object (each job and the summary)."
            )
            parser.add_argument(
                "--now", type=aware_datetime, default=None, help="Act as of this time (ISO 8601 with offset)."
            )

    def add_verb_arguments(self, parser: CommandParser) -> None:
        """The verb's own options."""

    def act(self, job: FutureJob, now: datetime, options: dict[str, Any]) -> str:
        """Apply the verb to ``job``: "changed", "unchanged" or "requested" (a run in flight
        ends it); PrescientError when refused."""
        raise NotImplementedError

    def preview(self, job: FutureJob, options: dict[str, Any]) -> str:
        """The state ``job`` would move to (or the outcome it would end with)."""
        to = store.preview(job, self.event)  # read from the table, nothing written
        return (self.ends_as or "ended") if to == states.END else str(to)

    # --- selection ---------------------------------------------------------------------------

    def filters(self, options: dict[str, Any]) -> dict[str, Any]:
        """The filters of the selection, validated (unknown names name the closest known)."""
        found: dict[str, Any] = {}
        if options["workflow"] is not None:
            found["workflow"] = known_workflow(options["workflow"])
        if options["entity"] is not None:
            label, key = options["entity"]
            found["entity_name"], found["entity_key"] = model_label(label), key
        if options["check"] is not None:
            found["job_exec"] = check_name(options["check"])
        if options["state"] is not None:
            found["state"] = options["state"]
        return found

    def selected(self, options: dict[str, Any]) -> models.QuerySet[FutureJob]:
        filters, ids = self.filters(options), options["ids"]
        if not filters and not ids:
            raise CommandError(self.missing_selection)
        queryset = FutureJob.objects.filter(**filters).order_by("pk")
        if ids:
            queryset = queryset.filter(pk__in=ids)
            missing = sorted(set(ids) - set(FutureJob.objects.filter(pk__in=ids).values_list("pk", flat=True)))
            if missing:
                raise not_found(missing[0])
        return queryset

    @staticmethod
    def one_job(options: dict[str, Any]) -> int | None:
        """The id when exactly one job is given by id and nothing else narrows it."""
        ids = options["ids"] or []
        others = (options["workflow"], options["entity"], options["check"], options["state"])
        return ids[0] if len(ids) == 1 and all(o is None for o in others) else None

    # --- running -----------------------------------------------------------------------------

    def handle(self, *args: Any, **options: Any) -> None:
        self.check_options(options)
        now = options["now"] or timezone.now()
        single = self.one_job(options)
        done: list[Done] = []
        for job in self.selected(options):
            entity = entity_text(job.entity_name, job.entity_key)
            row = Done(job.pk, entity, job.job_exec, job.workflow, job.state, "", "")
            try:
                row.to = self.preview(job, options)
                if options["dry_run"]:
                    row.result = "would not change" if row.to == job.state else "would change"
                else:
                    row.result = self.act(job, now, options)
            except PrescientError as exc:
                if single is not None:  # one job asked for: its refusal is the command's
                    raise refusal(exc) from exc
                row.to, row.result, row.detail = "", "refused", str(exc)
            done.append(row)
        if not done:
            self.nothing_selected("No live job", options, f"nothing to {self.infinitive}")
        self.report(done, options)

    def check_options(self, options: dict[str, Any]) -> None:
        """CommandError for a bad combination of the verb's own options."""

    def summary(self, done: list[Done], dry_run: bool) -> str:
        counts = Counter(row.result for row in done)
        if dry_run:
            head = f"Would {self.infinitive} {counts['would change']} job(s)"
            rest = [f"{counts['would not change']} unchanged"]
        else:
            head = f"{self.past} {counts['changed']} job(s)"
            rest = [f"{counts['unchanged']} unchanged"]
            if counts["requested"]:
                rest.insert(0, f"{counts['requested']} requested (runs in flight)")
        rest.append(f"{counts['refused']} refused")
        return "; ".join([head, *rest, f"{len(done)} selected."])

    def report(self, done: list[Done], options: dict[str, Any]) -> None:
        single = self.one_job(options)
        if options["json"]:
            self.emit({
                "verb": self.infinitive, "dry_run": options["dry_run"], "jobs": [asdict(row) for row in done],
                "summary": dict(Counter(row.result for row in done)),
            })
            return
        if single is not None and not options["dry_run"] and done:
            self.say(self.single_line(done[0]))
            return
        # A dry run's lines are the answer asked for: printed at every verbosity, as listings are.
        write = self.stdout.write if options["dry_run"] else self.say
        for row in done:
            write(self.line(row))
        write(self.summary(done, options["dry_run"]))

    def line(self, row: Done) -> str:
        what = f"job {row.id} {row.check} {row.entity}"
        if row.result == "refused":
            return f"{what}: refused: {row.detail}"
        if row.result in ("unchanged", "would not change"):
            return f"{what}: {row.state}, {row.result}"
        return f"{what}: {row.state} -> {row.to}" + ("" if row.result == "changed" else f" ({row.result})")

    def single_line(self, row: Done) -> str:
        """The report of a command given one job by id."""
        return self.line(row)

