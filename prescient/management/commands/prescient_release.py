from __future__ import annotations

from typing import Any

from prescient.engine.verbs import release
from prescient.states import Event

from ._steer import SteerCommand


class Command(SteerCommand):
    help = (
        "Release a paused workflow, job, or the paused jobs selected by entity, check or state: each "
        "returns to its last state (scheduled, or running if its run is still in flight)."
    )
    examples = (
        "prescient_release --workflow order-42",
        "prescient_release --id 17",
        "prescient_release --check shop.unshipped --dry-run --json",
    )
    event = Event.RELEASE
    infinitive, past = "release", "Released"
    unchanged = "was not paused"

    def workflow_verb(self, name: str, options: dict[str, Any]) -> int:
        return release(workflow=name, now=options["now"])

    def job_verb(self, job_id: int, options: dict[str, Any]) -> int:
        return release(job=job_id, now=options["now"])
