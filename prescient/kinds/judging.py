"""Judging the pending expectations of an instance once the transaction that saved or deleted it
commits: the committed state decides.

A save or deletion of a watched model notes the instance's key on its connection; when the
transaction commits (at once, in autocommit) each key noted is judged by one statement,
compiled once per model and database: the instance's pending expectations, and beside each
whether the row as committed meets its ``met`` Q and whether the row still exists. A save that
ends nothing costs that one statement, a job pending or not. A job found met (or its instance
gone) is ended ``met`` (``entity_missing``) in a short transaction of its own; a rolled-back
transaction is never judged, and a transaction that meets and un-meets before it commits ends
nothing.

A process that dies between the commit and the judgement leaves the job pending: its next rung
reads the instance again, finds it met and ends the job without calling the handler.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core.exceptions import FieldError
from django.db import DatabaseError, connections, models, router, transaction
from django.db.models import BooleanField, Case, CharField, Exists, Expression, Q, Value, When

from prescient.engine import store
from prescient.engine.targets import _now
from prescient.expectations import Expectation, generation, of_model
from prescient.models import FutureJob
from prescient.states import Event, Outcome

from .expectations import mark_met

logger = logging.getLogger(__name__)

#: Stand-ins for the two values that change from one judgement to the next, replaced in the
#: compiled statement's parameters: the instance's key as the live table has it (text), and its
#: primary key as the database stores it.
_KEY, _PK = object(), object()


class _Slot(Expression):
    """A parameter left open in a compiled statement (``%s``, filled at each judgement)."""

    def __init__(self, marker: object, output_field: models.Field[Any, Any]) -> None:
        super().__init__(output_field=output_field)
        self.marker = marker

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        return "%s", [self.marker]


@dataclass(frozen=True)
class Statement:
    """One model's judgement, compiled: rows ``(job_exec, met, present)``, ``met`` None for an
    expectation whose ``met`` is a callable (asked in Python of the row as committed) or could
    not be compiled (judged at its rung). One statement whether a job is pending or not: a
    second round trip when one is costs a save more than the sub-queries do (measured in
    docs/expectations.md, "Cost")."""

    sql: str
    params: tuple[Any, ...]
    pk: models.Field[Any, Any]
    callables: dict[str, Expectation] = field(default_factory=dict)

    def execute(self, alias: str, pk: Any) -> list[tuple[str, Any, Any]]:
        connection = connections[alias]
        value = self.pk.get_db_prep_value(pk, connection, prepared=False)
        key = str(pk)
        with connection.cursor() as cursor:
            cursor.execute(self.sql, [key if p is _KEY else value if p is _PK else p for p in self.params])
            return list(cursor.fetchall())


#: The names a trigger function gives the instance's key (text) and primary key (the column's
#: type) where a compiled statement has its two open parameters (:func:`inlined`).
KEY_VARIABLE, PK_VARIABLE = "prescient_key_", "prescient_pk_"


def inlined(compiled: Statement, alias: str) -> str | None:
    """``compiled`` as one SQL text for a PostgreSQL trigger function: its fixed parameters
    written in as literals, its two open ones as the variables ``KEY_VARIABLE`` and
    ``PK_VARIABLE``. None when it cannot be written so."""
    connection = connections[alias]
    stand_ins = {"key": "prescient-open-key-7d1c", "pk": "prescient-open-pk-7d1c"}
    params = [stand_ins["key"] if p is _KEY else stand_ins["pk"] if p is _PK else p for p in compiled.params]
    try:
        sql = str(connection.ops.compose_sql(compiled.sql, params))  # type: ignore[attr-defined]
    except Exception:  # a value psycopg cannot write as a literal: that model is judged by asking
        return None
    key, pk = f"'{stand_ins['key']}'", f"'{stand_ins['pk']}'"
    if key not in sql or pk not in sql:
        return None
    return sql.replace(key, KEY_VARIABLE).replace(pk, PK_VARIABLE)


#: Compiled statements by (model label, database alias, the registry's generation).
_compiled: dict[tuple[str, str, int], Statement | None] = {}


def statement(label: str, alias: str) -> Statement | None:
    """The compiled judgement of model ``label`` on database ``alias`` (None: no expectation),
    compiled again once an expectation is declared or forgotten."""
    key = (label, alias, generation())
    try:
        return _compiled[key]
    except KeyError:
        if len(_compiled) > 1000:  # declarations changing all the time (tests): start afresh
            _compiled.clear()
        compiled = _compiled[key] = _compile(label, alias)
        return compiled


def _compile(label: str, alias: str) -> Statement | None:
    entries = of_model(label)
    if not entries:
        return None
    model = apps.get_model(label)
    pk = model._meta.pk
    assert pk is not None
    asked: list[When] = []
    callables: dict[str, Expectation] = {}
    for entry in entries:
        if not isinstance(entry.met, Q):
            callables[entry.name] = entry
            continue
        try:
            rows = model._default_manager.using(alias).filter(entry.met, pk=_Slot(_PK, pk))
            rows.query.get_compiler(using=alias).as_sql()  # a Q that does not fit fails here or above
        except (FieldError, ValueError, TypeError) as exc:  # E032 says so; never the host's save
            cannot_judge(entry, exc)
            continue
        asked.append(When(job_exec=entry.name, then=Exists(rows)))
    met: Any = (
        Case(*asked, default=Value(None), output_field=BooleanField(null=True)) if asked
        else Value(None, output_field=BooleanField(null=True))
    )
    present = Exists(model._base_manager.using(alias).filter(pk=_Slot(_PK, pk)))
    jobs = (
        FutureJob.objects.using(alias).order_by()
        .filter(entity_name=label, entity_key=_Slot(_KEY, CharField()), job_exec__in=[e.name for e in entries])
        .annotate(met=met, present=present).values_list("job_exec", "met", "present")
    )
    sql, params = jobs.query.get_compiler(using=alias).as_sql()
    return Statement(sql=sql, params=tuple(params), pk=pk, callables=callables)


def judge(label: str, pk: Any, *, now: datetime | None = None) -> int:
    """Judge the pending expectations of the instance ``pk`` of model ``label`` on the state the
    database has now: each met ends ``met``, all end ``entity_missing`` when the row is gone.
    Returns how many ended."""
    alias = router.db_for_write(FutureJob)
    compiled = statement(label, alias)
    if compiled is None or pk is None:
        return 0
    rows = compiled.execute(alias, pk)
    if not rows:
        return 0
    endings: list[tuple[str, str]] = []
    for name, met, present in rows:
        if not present:
            endings.append((name, Outcome.ENTITY_MISSING))
        elif met or (met is None and _callable_met(compiled.callables.get(name), pk)):
            endings.append((name, Outcome.MET))
    return sum(_end(label, str(pk), name, outcome, _now(now), alias) for name, outcome in endings)


def _callable_met(entry: Expectation | None, pk: Any) -> bool:
    """A callable ``met`` asked of the row as the database has it (False when it cannot say)."""
    if entry is None:
        return False  # a Q that could not be compiled: judged at its rung
    instance = entry.model._default_manager.filter(pk=pk).first()
    if instance is None:
        return False
    try:
        return entry.met_by(instance)  # a callable here: called on the row as read
    except Exception as exc:  # the host's own code: never breaks its save
        cannot_judge(entry, exc)
        return False


def _end(label: str, key: str, name: str, outcome: str, now: datetime, alias: str) -> bool:
    """End the job now, or once its rung in flight returns; False when it had ended meanwhile."""
    with transaction.atomic(using=alias):
        job = FutureJob.objects.using(alias).select_for_update().filter(
            entity_name=label, entity_key=key, job_exec=name
        ).first()
        if job is None:
            return False  # ended meanwhile (its rung, another save)
        if outcome == Outcome.MET:
            mark_met(job, now)
        # A rung in flight: the job ends met when it returns, with this met_at (the store
        # writes the payload beside the request).
        store.end(job, Event.CANCEL, outcome, "met at save" if outcome == Outcome.MET else "deleted", now)
    return True


def judge_safely(label: str, pk: Any) -> None:
    """:func:`judge`, never raising into the host's code: a failure is logged and the job is
    judged at its next rung."""
    try:
        judge(label, pk)
    except Exception as exc:  # the save has committed: nothing may undo it or reach its caller
        logger.warning("pending expectations of %s:%s could not be judged after its save (%s: %s); "
                       "they are judged at their next rung", label, pk, type(exc).__name__, exc,
                       exc_info=not isinstance(exc, DatabaseError))


#: The expectations whose met could not be judged at a save, already logged by this process.
_logged: set[str] = set()


def cannot_judge(entry: Expectation, exc: BaseException) -> None:
    """``entry``'s met could not be judged at a save: logged once per process (a broken met
    would otherwise log at every save); the pending job is judged at its next rung, where a
    met that still fails is a failed run of the job, not of the host's save."""
    if entry.name in _logged:
        return
    _logged.add(entry.name)
    logger.error(
        "expectation %s: its met could not be judged at a save of %s (%s: %s); its jobs are judged at "
        "their rungs. manage.py check reports it (prescient.E032).", entry.name, entry.model_label,
        type(exc).__name__, exc,
    )
