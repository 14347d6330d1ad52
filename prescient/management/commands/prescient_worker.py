from __future__ import annotations

import logging
import os
import sys
from typing import Any

from django.core.management.base import CommandParser
from django.db import connection

from prescient.conf import setting
from prescient.runtime.worker import WorkerProcess

from ._args import PrescientCommand, batch_size, concurrency, lanes


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
            lanes=options["lanes"],
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
