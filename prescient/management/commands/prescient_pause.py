from __future__ import annotations

from typing import Any

from prescient.engine.verbs import pause
from prescient.states import Event

from ._steer import SteerCommand


class Command(SteerCommand):
    help = (
        "Pause a workflow (its jobs stop being started, and new ones scheduled into it start paused; "
        "runs in flight go on), one job, or the jobs selected by entity, check or state. Undo with "
        "prescient_release. An unknown workflow is an error unless --create."
    )
    examples = (
        "prescient_pause --workflow order-42",
        "prescient_pause --workflow order-43 --create   # before its first job",
        "prescient_pause --id 17",
        "prescient_pause --check shop.unshipped --state scheduled --dry-run",
    )
    event = Event.PAUSE
    infinitive, past = "pause", "Paused"
    unchanged = "was already paused"
    can_create = True

    def workflow_verb(self, name: str, options: dict[str, Any]) -> int:
        return pause(workflow=name, create_workflow=options["create"], now=options["now"])

    def job_verb(self, job_id: int, options: dict[str, Any]) -> int:
        return pause(job=job_id, now=options["now"])
