"""Dependencies: jobs scheduled ``after=`` other jobs wait, in state ``waiting``, until those end.

The verbs call this module to read ``after=``, to check and lock the parents, and to link new
waiting jobs to them; the links are written and judged by the store
(:mod:`prescient.engine.store.links`), which also moves waiting jobs on when parents end.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import F

from prescient.exceptions import InvalidDependency, UnknownParent
from prescient.models import FutureJob, JobHistory, ParentFailure

from . import bulk, store

#: What ``after=`` takes: live jobs, history rows, or their ids.
ParentRef = FutureJob | JobHistory | int


def parent_ids(after: Iterable[ParentRef] | None) -> list[int]:
    """The job ids of ``after``, in order, each once (InvalidDependency for anything else)."""
    if after is None:
        return []
    if isinstance(after, (str, bytes, FutureJob, JobHistory, int)):
        raise InvalidDependency("after must be a list of jobs or job ids")
    ids: list[int] = []
    for item in after:
        if isinstance(item, FutureJob):
            pk = item.pk
        elif isinstance(item, JobHistory):
            pk = item.job_id
        elif isinstance(item, int) and not isinstance(item, bool):
            pk = item
        else:
            raise InvalidDependency(f"after takes jobs or job ids, got {type(item).__name__}")
        if pk is None or pk < 1:
            raise InvalidDependency(f"not a job id: {pk!r}")
        ids.append(pk)
    return list(dict.fromkeys(ids))


_POLICIES = frozenset(ParentFailure.values)


def policy(on_parent_failure: str) -> str:
    """``on_parent_failure`` checked: ``"cancel"`` or ``"run"``."""
    if on_parent_failure in _POLICIES:  # every schedule() checks it: a set, not the enum's values
        return str(on_parent_failure)
    if on_parent_failure not in ParentFailure.values:
        raise InvalidDependency(
            f"on_parent_failure must be one of {', '.join(ParentFailure.values)}, got {on_parent_failure!r}"
        )
    return str(on_parent_failure)


def lock_parents(ids: Sequence[int]) -> None:
    """Lock the live parents among ``ids`` (so none ends before its new children are linked
    and seen); UnknownParent for ids neither live nor in the history."""
    if not ids:
        return
    rows = FutureJob.objects.select_for_update().filter(bulk.AnyOf(F("pk"), list(ids)))
    live = set(rows.values_list("pk", flat=True))
    missing = [pk for pk in ids if pk not in live]
    if missing:
        ended = set(JobHistory.objects.filter(bulk.AnyOf(F("job_id"), missing)).values_list("job_id", flat=True))
        unknown = [pk for pk in missing if pk not in ended]
        if unknown:
            raise UnknownParent(unknown)


def attach(child_pks: Sequence[int], parents: Sequence[int], on_parent_failure: str, now: datetime) -> None:
    """Link new waiting jobs to their (locked) parents, then judge them at once: parents that
    have ended already count by their history outcome."""
    if not child_pks:
        return
    store.links.add(child_pks, parents, on_parent_failure, now)
    store.resolve_waiting(FutureJob.objects.filter(bulk.AnyOf(F("pk"), list(child_pks))), now)


def current(job: FutureJob) -> FutureJob:
    """``job`` as it is now, or as it was when it already ended (a failed parent cancelled it)."""
    return FutureJob.objects.filter(pk=job.pk).first() or job


__all__: list[Any] = ["ParentRef", "attach", "current", "lock_parents", "parent_ids", "policy"]
