"""Expectations: "this must happen by then", declared on the host's own models.

    @prescient.expectation("shop.shipped", model="shop.Order", met=Q(status="shipped"),
                           ladder=[timedelta(hours=3), timedelta(hours=6), timedelta(hours=24)])
    def not_shipped(order, job, step): ...

This module is the registry of declarations and what each one knows of itself: whether an
instance meets it, and when its rungs fall for an instance (its ladder counted from a start,
in open time when it has a calendar). How a pending expectation runs, and how a save ends it,
is the job kind's business (:mod:`prescient.kinds.expectations`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.apps import apps
from django.core.exceptions import FieldError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from . import checks
from .calendars import CalendarError, get_calendar, worst_case
from .checks import Check
from .conf import setting
from .exceptions import AlreadyRegistered, UnknownCheck, WrongKind

if TYPE_CHECKING:
    from .retries import ErrorHandler

#: The kind of an expectation's jobs (see prescient.engine.kind).
KIND = "expectation"

F = TypeVar("F", bound=Callable[..., Any])
Met = Q | Callable[[Any], bool]
CalendarRef = str | Callable[[Any], "str | None"] | None


@dataclass(frozen=True)
class Expectation:
    """A declared expectation: its name, handler, model, condition, ladder and calendar."""

    name: str
    func: Callable[..., Any]
    model_label: str
    met: Met
    ladder: tuple[timedelta, ...]
    calendar: CalendarRef = None
    definition: Check | None = None

    @property
    def model(self) -> type[models.Model]:
        return apps.get_model(self.model_label)

    def met_by(self, instance: models.Model) -> bool:
        """Whether ``instance`` meets the expectation: its ``met`` callable called, or its Q
        asked of the database (one query, by primary key: the row as this transaction sees it)."""
        if isinstance(self.met, Q):
            return type(instance)._default_manager.filter(self.met, pk=instance.pk).exists()
        return bool(self.met(instance))

    def calendar_of(self, instance: models.Model) -> str | None:
        """The name of the calendar ``instance``'s ladder counts in (None: every hour counts)."""
        name = self.calendar(instance) if callable(self.calendar) else self.calendar
        return name or None

    def rungs(self, instance: models.Model, start: datetime) -> list[datetime]:
        """When each rung falls for ``instance``, its ladder counted from ``start`` (open time
        only, in its calendar's zone, when it has one). Not rounded to slots."""
        name = self.calendar_of(instance)
        if name is None:
            return [start + offset for offset in self.ladder]
        calendar = get_calendar(name)
        return [calendar.add(start, offset) for offset in self.ladder]

    def met_problem(self, model: type[models.Model]) -> str | None:
        """Why ``met`` (a Q) cannot be asked of ``model``'s rows (a field or lookup it does not
        have), or None. The Q is compiled, nothing is sent to the database."""
        if not isinstance(self.met, Q):
            return None
        try:
            model._default_manager.filter(self.met)
        except (FieldError, ValueError, TypeError) as exc:
            return f"Expectation {self.name!r}: its met {self.met!r} cannot be asked of {self.model_label}: {exc}"
        return None

    def problems(self) -> list[str]:
        """What is wrong with the declaration (for ``manage.py check``): the model, the ladder."""
        found = []
        try:
            model = apps.get_model(self.model_label)
        except LookupError:
            found.append(f"Expectation {self.name!r} names model {self.model_label!r}, which is not installed")
        else:
            problem = self.met_problem(model)
            if problem:
                found.append(problem)
        if not self.ladder:
            found.append(f"Expectation {self.name!r} has an empty ladder")
        elif list(self.ladder) != sorted(set(self.ladder)) or self.ladder[0] < timedelta(0):
            found.append(
                f"Expectation {self.name!r}: its ladder must be rising offsets from the start, each once, none "
                f"negative; got {[str(step) for step in self.ladder]}"
            )
        elif self.definition is not None and self.ladder[-1] > self.definition.horizon:
            found.append(
                f"Expectation {self.name!r}: its last rung ({self.ladder[-1]}) is beyond the horizon "
                f"({self.definition.horizon.days} days; raise HORIZON_DAYS or the expectation's horizon_days)"
            )
        if isinstance(self.calendar, str) and self.calendar not in (setting("CALENDARS") or {}):
            found.append(f"Expectation {self.name!r} names calendar {self.calendar!r}, not in PRESCIENT['CALENDARS']")
        elif self.ladder and self.definition is not None and self.calendar is not None:
            found.extend(self._calendar_problems(self.definition.horizon))
        return found

    def _calendar_problems(self, horizon: timedelta) -> list[str]:
        """Whether the last rung, counted in open time, can fall beyond the horizon in the coming
        year, in its calendar (a callable's: each calendar of ``CALENDARS`` it may pick): the
        worst case is a start at a closing time before the longest closure (a weekend, holidays)."""
        names = [self.calendar] if isinstance(self.calendar, str) else list(setting("CALENDARS") or {})
        found = []
        for name in names:
            try:
                calendar = get_calendar(name)
            except Exception:  # a malformed calendar: prescient.E031 says what is wrong with it
                continue
            try:
                worst, start = worst_case(calendar, self.ladder[-1], timezone.now())
            except CalendarError as exc:  # no open time for weeks: the ladder cannot be counted
                found.append(f"Expectation {self.name!r}: its ladder cannot be counted in calendar {name!r}: {exc}")
                continue
            if worst > horizon:
                found.append(
                    f"Expectation {self.name!r}: in calendar {name!r} its last rung ({self.ladder[-1]} of open time) "
                    f"falls up to {worst.days} days {worst.seconds // 3600} hours after its start (started "
                    f"{start.isoformat()}), beyond the horizon ({horizon.days} days; raise HORIZON_DAYS or the "
                    "expectation's horizon_days, or shorten the ladder)"
                )
        return found


_registry: dict[str, Expectation] = {}
#: Called with each expectation registered (the kind connects its model's signals).
watchers: list[Callable[[Expectation], None]] = []
#: Changes whenever an expectation is registered or forgotten (what was compiled from the
#: registry, such as the statement a save is judged by, is compiled again).
_generation = [0]


def generation() -> int:
    """How many times the registry has changed: compiled judgements are keyed by it."""
    return _generation[0]


def expectation(
    name: str,
    *,
    model: str | type[models.Model],
    met: Met,
    ladder: Sequence[timedelta],
    calendar: CalendarRef = None,
    timeout_seconds: float | None = None,
    max_retries: int | None = None,
    horizon_days: float | None = None,
    error_handler: ErrorHandler | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of the expectation ``name``.

    ``prescient.expect(instance, name)`` then starts one pending job for the instance, due at
    each rung of ``ladder`` (offsets from the start, in open time of ``calendar`` when given:
    a name of ``PRESCIENT["CALENDARS"]`` or ``callable(instance) -> name``). At each rung the
    instance is read: when it meets ``met`` (a Q on the model, or ``callable(instance) ->
    bool``) the job ends ``met``; otherwise ``func(instance, job, step)`` is called with the
    rung's number and :data:`prescient.signals.expectation_missed` is sent. After the last rung
    it ends ``missed``. A save that meets it ends it ``met`` once the saving transaction commits.
    The keyword arguments override the ``PRESCIENT`` settings, as for a check.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("An expectation needs a non-empty name")
    label = checks._model_label(model)
    if label is None:
        raise ValueError("An expectation needs a model")
    if not isinstance(met, Q) and not callable(met):
        raise TypeError(f"met must be a Q or a callable(instance) -> bool, got {type(met).__name__}")
    if calendar is not None and not isinstance(calendar, str) and not callable(calendar):
        raise TypeError(f"calendar must be a name or a callable(instance) -> name, got {type(calendar).__name__}")
    steps = tuple(ladder)
    if not all(isinstance(step, timedelta) for step in steps):
        raise TypeError("ladder must be a list of timedeltas (offsets from the start)")

    def decorator(func: F) -> F:
        definition = Check(
            name=name, func=func, model_label=label, timeout_seconds=timeout_seconds, max_retries=max_retries,
            horizon_days=horizon_days, error_handler=error_handler, kind=KIND,
        )
        try:
            existing = checks.get_check(name)
        except UnknownCheck:
            existing = None
        if existing is not None and checks._identity(existing.func) != checks._identity(func):
            raise AlreadyRegistered(
                f"{name!r} is already registered to {checks._identity(existing.func)}; "
                f"cannot register the expectation {checks._identity(func)} under the same name"
            )
        entry = Expectation(name, func, label, met, steps, calendar, definition)
        checks.add(definition)
        _registry[name] = entry
        _generation[0] += 1
        func.prescient_expectation = entry  # type: ignore[attr-defined]
        for watcher in watchers:
            watcher(entry)
        return func

    return decorator


def get_expectation(ref: str | Callable[..., Any] | Expectation) -> Expectation:
    """The registered expectation for a name or a decorated function; WrongKind for a check's
    (it is started with ``schedule()``), UnknownCheck otherwise."""
    if isinstance(ref, Expectation):
        return ref
    if callable(ref):
        entry = getattr(ref, "prescient_expectation", None)
        if isinstance(entry, Expectation) and _registry.get(entry.name) is entry:
            return entry
        name = getattr(getattr(ref, "prescient_check", None), "name", None)
    else:
        if isinstance(ref, str) and ref in _registry:
            return _registry[ref]
        name = ref
    try:
        check = checks.get_check(name) if isinstance(name, str) else None
    except UnknownCheck:
        check = None
    if check is not None and check.kind != KIND:
        raise WrongKind(
            f"{check.name!r} is a {check.kind}, not an expectation: "
            f"schedule it with prescient.schedule(instance, {check.name!r})"
        )
    raise UnknownCheck(checks._identity(ref) if callable(ref) else ref, _registry)


def registered() -> Iterator[Expectation]:
    """Every registered expectation, by name."""
    for name in sorted(_registry):
        yield _registry[name]


def of_model(label: str) -> list[Expectation]:
    """The expectations about the model ``label`` (``app_label.modelname``)."""
    return [entry for entry in _registry.values() if entry.model_label == label]


def unregister(name: str) -> None:
    """Forget an expectation (for tests and reloads)."""
    _registry.pop(name, None)
    _generation[0] += 1
    checks.unregister(name)
