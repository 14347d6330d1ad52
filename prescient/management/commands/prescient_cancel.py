from __future__ import annotations

from datetime import datetime
from typing import Any

from prescient.engine.verbs import cancel_job
from prescient.models import FutureJob
from prescient.states import Event

from ._select import JobsCommand


class Command(JobsCommand):
    help = (
        "End jobs with outcome 'cancelled' (as prescient.cancel() does): by id, workflow, entity, check "
        "or state. A job whose run is in flight ends when the run returns."
    )
    examples = (
        "prescient_cancel --entity shop.order:42",
        "prescient_cancel --entity shop.order:42 --check shop.unshipped",
        "prescient_cancel --workflow order-42 --dry-run --json",
    )
    event = Event.CANCEL
    infinitive, past, ends_as = "cancel", "Cancelled", "cancelled"

    def act(self, job: FutureJob, now: datetime, options: dict[str, Any]) -> str:
        return "changed" if cancel_job(job.pk, now=now) == "ended" else "requested"
