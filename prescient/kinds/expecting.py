"""Starting expectations (:func:`expect`) and ending them when their instance is saved or deleted.

A save through the ORM of an instance that meets a pending expectation ends it ``met`` once the
saving transaction commits, judged on what it committed (a rollback leaves it pending; see
:mod:`.judging`); a deletion ends it ``entity_missing``. Only models with an expectation get
the receivers (``post_save``/``post_delete`` connected per model), so a save of any other model
costs nothing; a save of a model with one costs one indexed statement, which also asks a
``met`` Q of the row (a callable ``met`` is called only while a job is pending).
``QuerySet.update()`` sends no signal: the next rung finds the instance met and ends the job
``met``, its handler uncalled, or :func:`recheck` judges it at once.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import IntegrityError, models, transaction
from django.db.models import Q, QuerySet
from django.db.models.signals import post_delete, post_save

from prescient import slots
from prescient.conf import setting
from prescient.engine import store
from prescient.engine.targets import _now, entity_ref
from prescient.exceptions import InvalidTime
from prescient.expectations import KIND, Expectation, get_expectation, of_model, registered, watchers
from prescient.models import FutureJob

from . import commit_notices, judging

logger = logging.getLogger(__name__)


def expect(
    instance: models.Model,
    expectation: str | Any,
    *,
    start: datetime | None = None,
    now: datetime | None = None,
) -> FutureJob | None:
    """Start the expectation ``expectation`` (its name or handler) for ``instance``: one pending
    job, due at its first rung (``start`` plus the ladder's first offset, default start now,
    rounded up to a slot). Returns the pending job; an existing one is returned unchanged.
    When ``instance`` meets the expectation already, nothing is created and None returned.

    Raises UnknownCheck, InvalidEntity or InvalidTime (a ladder reaching beyond the horizon),
    writing nothing.
    """
    entry = get_expectation(expectation)
    definition = entry.definition
    assert definition is not None
    entity_name, entity_key = entity_ref(instance, definition)
    now = _now(now)
    start = now if start is None else slots.require_aware(start, "start")
    key = {"entity_name": entity_name, "entity_key": entity_key, "job_exec": entry.name}
    existing = FutureJob.objects.filter(**key).first()
    if existing is not None:
        return existing
    # Met as the database has the row, for a Q and a callable alike (a callable is given the
    # row read again, not the instance in memory, which may hold unsaved changes).
    judged = instance if isinstance(entry.met, Q) else type(instance)._default_manager.filter(pk=instance.pk).first()
    if judged is not None and entry.met_by(judged):
        return None
    rungs = entry.rungs(instance, start)
    if not rungs:
        raise InvalidTime(f"Expectation {entry.name!r} has an empty ladder")
    if rungs[-1] > now + definition.horizon:
        raise InvalidTime(
            f"The last rung of expectation {entry.name!r} falls at {rungs[-1].isoformat()}, beyond its horizon "
            f"({definition.horizon.days} days from now)"
        )
    first = slots.round_up(rungs[0], int(setting("SLOT_MINUTES")))
    job = store.new_job(
        entity_name=entity_name, entity_key=entity_key, job_exec=entry.name, kind=KIND, due=first, now=now,
        payload={
            "start": start.isoformat(), "rungs": [rung.isoformat() for rung in rungs], "step": 0,
            "calendar": entry.calendar_of(instance),
        },
    )
    written = store.insert_new([job], returning=True, wake=first <= now)  # a rung due already wakes a worker
    if written is None:  # this database cannot return the new id: insert it on its own
        try:
            with transaction.atomic():
                store.insert(job, wake=first <= now)
                written = 1
        except IntegrityError:
            written = 0
    if not written:  # another process started it meanwhile
        return FutureJob.objects.filter(**key).first()
    logger.debug("job id=%s expects %s of %s:%s, first rung %s", job.pk, entry.name, entity_name, entity_key, first)
    return job


def recheck(instances: QuerySet[Any] | Iterable[models.Model], *, now: datetime | None = None) -> int:
    """Judge ``met`` now for each of ``instances`` (a queryset or model instances) that has a
    pending expectation, as a save would have: for writes no save saw (``bulk_update()``, raw
    SQL, a related row that makes a join Q true). Returns how many jobs ended (``met``, or
    ``entity_missing`` for a row deleted behind the ORM's back).

    One query finds which of them have pending expectations (by the live table's entity index);
    each that has is then judged as after a save, on the state the database has now.
    """
    if isinstance(instances, QuerySet):
        groups: dict[type[models.Model], Any] = {instances.model: instances}
    else:
        groups = defaultdict(list)
        for instance in instances:
            groups[type(instance)].append(instance)
    ended = 0
    for model, members in groups.items():
        label = model._meta.label_lower
        names = [entry.name for entry in of_model(label)]
        if not names:
            continue
        pending = set(
            FutureJob.objects.filter(entity_name=label, job_exec__in=names).values_list("entity_key", flat=True)
        )
        if not pending:
            continue
        if isinstance(members, QuerySet):
            pks: Iterable[Any] = (
                pk for chunk in _chunks(sorted(pending), 500)
                for pk in members.filter(pk__in=chunk).values_list("pk", flat=True)
            )
        else:
            pks = [instance.pk for instance in members if str(instance.pk) in pending]
        for pk in pks:
            ended += judging.judge(label, pk, now=now)
    return ended


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for first in range(0, len(items), size):
        yield items[first:first + size]


def _saved(
    sender: type[models.Model], instance: models.Model, raw: bool = False, using: str = "default", **kwargs: Any
) -> None:
    if not raw:  # a fixture being loaded is no save by the application
        commit_notices.note(instance, using)


def _deleted(sender: type[models.Model], instance: models.Model, using: str = "default", **kwargs: Any) -> None:
    commit_notices.note(instance, using)


def watch(entry: Expectation) -> None:
    """Connect the save and delete receivers of ``entry``'s model (once per model). Before the
    app registry is ready the model is named lazily, as Django allows for model signals."""
    label = entry.model_label
    sender: Any = label
    if apps.ready:
        try:
            sender = apps.get_model(label)
        except LookupError:
            return  # reported by the system checks (diagnostics.EXPECTATION_MALFORMED)
    uid = f"prescient.expectations:{label}"
    post_save.connect(_saved, sender=sender, dispatch_uid=uid, weak=False)
    post_delete.connect(_deleted, sender=sender, dispatch_uid=uid, weak=False)


def watch_all() -> None:
    """Watch the models of every expectation registered so far, and of those registered later."""
    if watch not in watchers:
        watchers.append(watch)
    for entry in registered():
        watch(entry)
