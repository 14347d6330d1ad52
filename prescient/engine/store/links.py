"""Links between jobs: writing them, and judging what a waiting job's parents' ends mean for it.

A job scheduled ``after=`` other jobs is ``waiting`` with one :class:`~prescient.models.JobLink`
per parent. Parents are job ids, live or already in the history (a job keeps its id when it
ends). What a waiting job becomes once parents end (:func:`triage`):

- a parent ended other than ``completed`` and the link says ``cancel``: it ends ``cancelled``,
  its reason naming that parent and its outcome (at once, whatever its other parents do);
- every parent has ended: it is unblocked, ``scheduled`` (``paused``, remembering
  ``scheduled``, when its workflow is paused);
- else it goes on waiting.

Only a job marked ``has_dependants`` (set by :func:`add`, in the transaction that links a child
to it) can have waiters: the store skips these statements for every other job.

Concurrency: the waiting rows are locked (in id order) before their parents are counted, so of
two transactions ending the last two parents of one child, the second counts after the first
has committed and sees both gone. Workflow rows are read with a shared lock, as scheduling does,
so a pause either sees an unblocked job or is seen by it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection
from django.db.models import Case, F, Q, QuerySet, Value, When

from prescient.models import FutureJob, JobHistory, JobLink, ParentFailure, Workflow
from prescient.states import Outcome, State

from .. import bulk

#: Waiting jobs judged per statement (SQLite limits the parameters of one statement).
CHUNK = 5000


def add(child_pks: Sequence[int], parent_pks: Sequence[int], on_parent_failure: str, now: datetime) -> None:
    """Write the links of new waiting jobs ``child_pks`` to each of ``parent_pks`` (locked by
    the caller), and mark the live parents ``has_dependants``: only jobs so marked pay for the
    link, workflow and waiter statements when they settle or end."""
    parents = list(dict.fromkeys(parent_pks))
    rows = [
        JobLink(parent_id=parent, child_id=child, on_parent_failure=on_parent_failure, created_at=now)
        for child in child_pks for parent in parents
    ]
    fields = bulk.insert_fields(JobLink)
    for batch in bulk.chunks(rows, bulk.max_rows(fields, 1000)):
        bulk.insert_rows(JobLink, bulk.prep_all(batch, fields, add=True), fields)
    if rows:
        FutureJob.objects.filter(bulk.AnyOf(F("pk"), parents), has_dependants=False).update(has_dependants=True)


def waiting_children(parent_pks: Iterable[int]) -> QuerySet[FutureJob]:
    """The waiting jobs that wait on any of ``parent_pks``."""
    children = JobLink.objects.filter(bulk.AnyOf(F("parent_id"), list(parent_pks))).values("child_id")
    return FutureJob.objects.filter(state=State.WAITING, pk__in=children)


def lock_workflows_of_children(parent_pks: Sequence[int]) -> None:
    """Take the shared locks on the workflows of the waiting children of ``parent_pks`` now,
    before the parents' rows are locked: a pause locks its workflow before its jobs, so taking
    them in that order too keeps the two from waiting on each other."""
    pks = [pk for pk in parent_pks if isinstance(pk, int)]  # a bad id is the caller's to report
    if not pks:
        return
    names = waiting_children(pks).exclude(workflow="").values_list("workflow", flat=True)
    paused_workflows(set(names))


def paused_workflows(names: Iterable[str]) -> set[str]:
    """Which of the workflows ``names`` are paused, their rows read under a shared lock (held
    until the transaction ends; PostgreSQL, elsewhere writers are serialised)."""
    wanted = sorted(set(names) - {""})
    if not wanted:
        return set()
    table = connection.ops.quote_name(Workflow._meta.db_table)
    lock = " ORDER BY name FOR SHARE" if connection.vendor == "postgresql" else ""
    marks = ", ".join(["%s"] * len(wanted))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT name, paused_at FROM {table} WHERE name IN ({marks}){lock}", wanted)
        return {name for name, paused_at in cursor.fetchall() if paused_at is not None}


def lock_waiting(jobs: QuerySet[FutureJob], limit: int | None = None) -> list[int]:
    """The ids of the waiting jobs among ``jobs``, locked in id order."""
    rows = jobs.filter(state=State.WAITING).order_by("pk").select_for_update().values_list("pk", flat=True)
    return list(rows if limit is None else rows[:limit])


def triage(pks: Sequence[int]) -> tuple[dict[int, str], list[int]]:
    """For locked waiting jobs ``pks``: ``({id: reason} to cancel, [ids] to unblock)``."""
    cancel: dict[int, str] = {}
    unblock: list[int] = []
    for start in range(0, len(pks), CHUNK):
        chunk = list(pks[start:start + CHUNK])
        links = JobLink.objects.filter(bulk.AnyOf(F("child_id"), chunk))
        blocked = set(
            links.filter(parent_id__in=FutureJob.objects.values("pk")).values_list("child_id", flat=True)
        )
        failed = links.filter(
            on_parent_failure=ParentFailure.CANCEL,
            parent_id__in=JobHistory.objects.exclude(outcome=Outcome.COMPLETED).values("job_id"),
        ).order_by("parent_id").values_list("child_id", "parent_id")
        failed_links = list(failed)
        outcomes = dict(
            JobHistory.objects.filter(bulk.AnyOf(F("job_id"), list({p for _, p in failed_links})))
            .exclude(outcome=Outcome.COMPLETED).values_list("job_id", "outcome")
        )
        for child, parent in failed_links:
            cancel.setdefault(child, f"parent job {parent} ended {outcomes.get(parent, 'unknown')}")
        unblock.extend(pk for pk in chunk if pk not in cancel and pk not in blocked)
    return cancel, unblock


def unblock(pks: Sequence[int]) -> tuple[int, bool]:
    """Move locked waiting jobs ``pks`` on: ``scheduled``, or ``paused`` remembering
    ``scheduled`` when their workflow is paused or they were paused themselves while waiting
    (``last_state`` ``paused``). Returns (how many, whether any may be scheduled)."""
    moved, scheduled = 0, False
    for start in range(0, len(pks), CHUNK):
        chunk = list(pks[start:start + CHUNK])
        rows = FutureJob.objects.filter(bulk.AnyOf(F("pk"), chunk), state=State.WAITING)
        names = rows.exclude(workflow="").values_list("workflow", flat=True).distinct()
        held = Q(last_state=State.PAUSED)
        paused = paused_workflows(names)
        if paused:
            held |= Q(workflow__in=paused)
        # One statement: both CASEs read the row as it was (SQL's SET sees the old values).
        count = rows.update(
            state=Case(When(held, then=Value(State.PAUSED.value)), default=Value(State.SCHEDULED.value)),
            last_state=Case(When(held, then=Value(State.SCHEDULED.value)), default=Value("")),
        )
        moved += count
        scheduled = scheduled or bool(count)  # perhaps all paused: a wake-up too many is harmless
    return moved, scheduled


def insert_waiting(jobs: list[FutureJob]) -> list[int]:
    """Insert new waiting ``jobs`` in one statement, skipping any that already has a pending
    job; returns the ids written (needs ``INSERT … RETURNING``: PostgreSQL, SQLite 3.35+)."""
    unique = next(c for c in FutureJob._meta.constraints if getattr(c, "name", "") == "prescient_one_pending_job")
    names = getattr(unique, "fields", ())
    columns = tuple(str(getattr(FutureJob._meta.get_field(name), "column", name)) for name in names)
    fields = bulk.insert_fields(FutureJob)
    pk = FutureJob._meta.pk
    assert pk is not None
    return bulk.insert_rows(
        FutureJob, bulk.prep_all(jobs, fields, add=True), fields, skip_conflicts_on=columns, returning=pk.column
    )
