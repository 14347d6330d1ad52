from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from django.core.management.base import CommandParser
from django.db import connection

from prescient.conf import setting
from prescient.engine.decisions import RETRIED, TickSummary
from prescient.models.workers import GIVEN_NAME, GIVEN_NAME_MAX
from prescient.runtime.worker import REPORT_SECONDS, WorkerProcess
from prescient.states import Outcome

from ._args import PrescientCommand, batch_size, concurrency, lanes


def worker_name(text: str) -> str:
    """argparse type: a worker's given name (no ``:`` nor ``/``, which its claims' tokens use)."""
    if len(text) > GIVEN_NAME_MAX or not GIVEN_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a worker name: give 1 to {GIVEN_NAME_MAX} letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return text


def interval_fields(done: TickSummary, seconds: float) -> dict[str, Any]:
    """What a worker did in the past ``seconds``: ``runs`` (the jobs its runs settled), the
    ``counts`` that are not zero (outcomes, rescheduled, retried, …, in the order of the final
    summary line) and ``failures`` (failed runs: retried, or ended failed)."""
    counts = {key: count for key, count in done.fields().items() if key != "processed" and count}
    failures = done.counts.get(RETRIED, 0) + done.counts.get(Outcome.FAILED.value, 0)
    return {"seconds": round(seconds), "runs": done.processed, "failures": failures, "counts": counts}


def interval_line(fields: dict[str, Any]) -> str:
    """``prescient worker: last 60s: runs=12 failures=1 completed=3 rescheduled=8 failed=1``."""
    counts = "".join(f" {key}={count}" for key, count in fields["counts"].items())
    return f"prescient worker: last {fields['seconds']}s: runs={fields['runs']} failures={fields['failures']}{counts}"


class Command(PrescientCommand):
    #: --json: the lines are JSON objects.
    as_json = False
    help = (
        "Run prescient jobs continuously: at every slot boundary, and at once when a job is made "
        "due now (woken by LISTEN/NOTIFY on PostgreSQL). SIGTERM/SIGINT stop it gracefully."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency", type=concurrency, default=min(os.cpu_count() or 1, concurrency.most),
            help="Child processes running checks (default: the number of CPUs).",
        )
        parser.add_argument(
            "--lanes", type=lanes, default=None,
            help="Jobs each child runs at once: threads for sync code, one event loop for async code "
            "(default: the WORKER_LANES setting). Many lanes suit checks that wait on the network.",
        )
        parser.add_argument("--once", action="store_true", help="Process what is due now, then exit.")
        parser.add_argument("--batch-size", type=batch_size, default=None, help="Jobs claimed per batch.")
        parser.add_argument(
            "--queue", default=None,
            help="Serve only these queues (comma-separated), highest priority first: a check's queue= or a "
            "django.tasks queue; an empty name ('mail,') includes the checks without a queue. Default: every job.",
        )

        parser.add_argument(
            "--name", type=worker_name, default=None,
            help=f"This worker's name, the same across its restarts: with the host, it labels its metrics "
            f"(1 to {GIVEN_NAME_MAX} letters, digits, '.', '_' or '-'; default: the host name). Give workers "
            "on one host different names to tell them apart.",
        )
        parser.add_argument(
            "--json", action="store_true",
            help="Print its lines as JSON objects, one a line: started, one a minute (interval), stopped.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.as_json = bool(options["json"])
        if (
            options["verbosity"] >= 1
            and not logging.getLogger("prescient").handlers
            and not logging.getLogger().handlers
        ):
            logging.basicConfig(
                stream=sys.stderr, level=logging.INFO if options["verbosity"] >= 2 else logging.WARNING,
                format="%(asctime)s %(levelname)s %(name)s %(message)s",
            )
        worker = WorkerProcess(
            concurrency=options["concurrency"], once=options["once"], batch_size=options["batch_size"],
            lanes=options["lanes"], name=options["name"],
            queues=None if options["queue"] is None else [name.strip() for name in options["queue"].split(",")],
            on_start=self.started, on_report=self.report, report_seconds=REPORT_SECONDS,
        )
        worker.run()
        if self.as_json:
            self.emit({"event": "stopped", "name": worker.name, **worker.summary.fields()})
        else:
            self.say(worker.summary.line().replace("prescient tick:", "prescient worker:"))

    def started(self, worker: WorkerProcess) -> None:
        """One line once the worker has registered: who it is and what it runs on (not at -v 0)."""
        if self.as_json:
            self.emit({
                "event": "started", "name": worker.name, "pid": os.getpid(), "concurrency": worker.concurrency,
                "lanes": worker.lanes, "database": connection.vendor, "slot_minutes": setting("SLOT_MINUTES"),
                "queues": worker.queues,
            })
            return
        queues = "all" if worker.queues is None else ",".join(name or "(checks)" for name in worker.queues)
        lanes = f"lanes={worker.lanes} " if worker.lanes > 1 else ""  # one lane: as before lanes existed
        self.say(
            f"prescient worker: started name={worker.name} pid={os.getpid()} concurrency={worker.concurrency} "
            f"{lanes}database={connection.vendor} slot={setting('SLOT_MINUTES')}min queues={queues}"
        )

    def report(self, done: TickSummary, seconds: float) -> None:
        """A line a minute: what the worker's runs did since the last one (not at -v 0; with -v 2
        the log has a line per run besides)."""
        fields = interval_fields(done, seconds)
        if self.as_json:
            self.emit({"event": "interval", **fields})
        else:
            self.say(interval_line(fields))
