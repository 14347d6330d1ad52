from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from django.core.management.base import CommandParser
from django.db import connection

from prescient.conf import setting
from prescient.models.workers import GIVEN_NAME, GIVEN_NAME_MAX
from prescient.runtime.worker import WorkerProcess

from ._args import PrescientCommand, batch_size, concurrency, lanes


def worker_name(text: str) -> str:
    """argparse type: a worker's given name (no ``:`` nor ``/``, which its claims' tokens use)."""
    if len(text) > GIVEN_NAME_MAX or not GIVEN_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a worker name: give 1 to {GIVEN_NAME_MAX} letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return text


class Command(PrescientCommand):
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

    def handle(self, *args: Any, **options: Any) -> None:
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
            on_start=self.started,
        )
        worker.run()
        self.say(worker.summary.line().replace("prescient tick:", "prescient worker:"))

    def started(self, worker: WorkerProcess) -> None:
        """One line once the worker has registered: who it is and what it runs on (not at -v 0)."""
        queues = "all" if worker.queues is None else ",".join(name or "(checks)" for name in worker.queues)
        lanes = f"lanes={worker.lanes} " if worker.lanes > 1 else ""  # one lane: as before lanes existed
        self.say(
            f"prescient worker: started name={worker.name} pid={os.getpid()} concurrency={worker.concurrency} "
            f"{lanes}database={connection.vendor} slot={setting('SLOT_MINUTES')}min queues={queues}"
        )
