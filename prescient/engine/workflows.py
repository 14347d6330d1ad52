"""Which workflow names exist: a name is known once a job or a schedule uses it, or a pause
made it on purpose. Steering an unknown name is refused (it is a typo, most often) rather
than creating a workflow nothing uses."""

from __future__ import annotations

from prescient.exceptions import UnknownWorkflow
from prescient.models import FutureJob, Schedule, Workflow

#: Names read at most to suggest the closest to a typo (a larger set only slows the error).
MAX_NAMES = 10_000


def exists(name: str) -> bool:
    """Whether ``name`` is a workflow row's, or a live job's or a schedule's workflow."""
    return bool(name) and (
        Workflow.objects.filter(name=name).exists()
        or FutureJob.objects.filter(workflow=name).exists()
        or Schedule.objects.filter(workflow=name).exists()
    )


def names() -> set[str]:
    """The known workflow names (at most about :data:`MAX_NAMES` of each source)."""
    found = set(Workflow.objects.values_list("name", flat=True)[:MAX_NAMES])
    found.update(FutureJob.objects.exclude(workflow="").values_list("workflow", flat=True).distinct()[:MAX_NAMES])
    found.update(Schedule.objects.exclude(workflow="").values_list("workflow", flat=True).distinct()[:MAX_NAMES])
    return found


def require(name: str) -> None:
    """UnknownWorkflow, naming the closest known names, unless workflow ``name`` exists."""
    if not exists(name):
        raise UnknownWorkflow(name, names())
