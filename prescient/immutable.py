"""What a job keeps for life: ``first_check_at`` cannot be changed by ``job.save()``.

The column is ``editable=False`` (no form shows it), but that does not stop code: a job whose
``first_check_at`` was changed and then saved used to store the new value, and its history then
showed a first check after its end. Two receivers of Django's model signals for ``FutureJob``
refuse it: ``post_init`` remembers the value a job was loaded (or made) with, and ``pre_save``
raises :class:`~prescient.exceptions.ImmutableField` when a save of a stored job would write
another. A new job may set it freely until its first save; a save whose ``update_fields`` leave
it out is not concerned; a job loaded with the field deferred is not checked. ``QuerySet.update``
is not a ``save()``: it is not checked either (only the store writes job rows, and it never
changes the column).

Receivers rather than a ``save()`` override: the store, the one writer of job rows, calls
``save()``; an override would sit between it and the database. Connected by :func:`install`
(the app's ``ready()``), to the model by name: this module sits below ``models``.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_init, pre_save

from .exceptions import ImmutableField

#: Where a job keeps the value it was loaded (or first saved) with.
KEPT = "_prescient_first_check_at"
FIELD = "first_check_at"


def remember(sender: Any, instance: Any, **kwargs: Any) -> None:
    instance.__dict__[KEPT] = instance.__dict__.get(FIELD)


def refuse_a_new_first_check_at(
    sender: Any, instance: Any, raw: bool = False, update_fields: Any = None, **kwargs: Any
) -> None:
    current = instance.__dict__.get(FIELD)
    if raw:
        return
    if instance._state.adding:
        instance.__dict__[KEPT] = current  # what it is written with is its value for life
        return
    kept = instance.__dict__.get(KEPT)
    if kept is None or current is None or (update_fields is not None and FIELD not in update_fields):
        return
    if current != kept:
        raise ImmutableField(
            FIELD, instance.pk,
            f"Job {instance.pk}: first_check_at is fixed when the job is scheduled ({kept.isoformat()}); "
            f"it cannot be changed to {current.isoformat() if hasattr(current, 'isoformat') else current!r}. "
            "To move the job's next check, use prescient.sleep(job, at=...) or schedule(..., replace=True).",
        )


def install() -> None:
    """Connect the receivers (once; the app's ``ready()`` calls it)."""
    post_init.connect(remember, sender="prescient.FutureJob", dispatch_uid="prescient.immutable.remember")
    pre_save.connect(
        refuse_a_new_first_check_at, sender="prescient.FutureJob", dispatch_uid="prescient.immutable.refuse"
    )
