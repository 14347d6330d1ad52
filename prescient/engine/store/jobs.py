"""The one constructor of a new job, for every kind: checks, tasks, recurring occurrences,
expectations. It decides the state a job starts in; how the job is inserted is :mod:`.inserting`'s."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prescient.models import FutureJob
from prescient.states import State


def new_job(
    *,
    entity_name: str,
    entity_key: str,
    job_exec: str,
    due: datetime,
    now: datetime,
    kind: str = "check",
    workflow: str = "",
    paused: bool = False,
    waiting: bool = False,
    queue: str = "",
    priority: int = 0,
    payload: Any = None,
    limit_key: str = "",
    rate_key: str = "",
) -> FutureJob:
    """A new job (not saved), first due at ``due``: ``waiting`` when it has parents (whether or
    not its workflow is paused: it is judged when unblocked), else ``paused`` (remembering
    ``scheduled``) when its workflow is, else ``scheduled``."""
    paused = paused and not waiting
    return FutureJob(
        kind=kind,
        entity_name=entity_name,
        entity_key=entity_key,
        job_exec=job_exec,
        workflow=workflow,
        state=State.WAITING if waiting else State.PAUSED if paused else State.SCHEDULED,
        last_state=State.SCHEDULED if paused else "",
        first_check_at=due,
        next_check_at=due,
        created_at=now,
        queue=queue,
        limit_key=limit_key,
        rate_key=rate_key,
        priority=priority,
        payload=payload,
    )
