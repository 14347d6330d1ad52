from __future__ import annotations

from datetime import datetime
from typing import Any

from prescient.engine.verbs import run_now
from prescient.models import FutureJob
from prescient.states import Event

from ._select import JobsCommand


class Command(JobsCommand):
    help = (
        "Make jobs due at once, without waiting for a slot: scheduled or buried ones, or paused ones, "
        "which are released. A running worker starts them at once; else the next tick."
    )
    examples = (
        "prescient_run_now --id 17",
        "prescient_run_now --state buried --check shop.unshipped --dry-run",
        "prescient_run_now --entity shop.order:42 --json",
    )
    event = Event.RUN_NOW
    infinitive, past = "run now", "Made due now"

    def preview(self, job: FutureJob, options: dict[str, Any]) -> str:
        to = super().preview(job, options)
        return f"{to}, due now" if to == "scheduled" else to

    def act(self, job: FutureJob, now: datetime, options: dict[str, Any]) -> str:
        run_now(job.pk, now=now)
        return "changed"
