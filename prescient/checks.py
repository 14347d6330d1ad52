"""What a check is: the registry of check definitions, names to code.

Only code registers checks (``@prescient.check``); nothing is imported by name. A definition
carries a job's timeout, retries, re-checks and horizon, whatever its kind; how a job of each
kind runs is :mod:`prescient.kinds`'s business.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.apps import apps
from django.db import models

from . import limits, slots
from .conf import MINUTES_PER_DAY, setting
from .exceptions import AlreadyRegistered, UnknownCheck, WrongKind
from .limits import Limit, Rate

if TYPE_CHECKING:
    from .models import FutureJob
    from .retries import ErrorHandler

CheckResult = timedelta | datetime | None
CheckFunc = Callable[[Any, "FutureJob"], CheckResult]
F = TypeVar("F", bound=Callable[..., Any])


class Released:
    """The type of :data:`RELEASE` (raising :class:`prescient.Release` does the same)."""

    _instance: Released | None = None

    def __new__(cls) -> Released:  # one value, also across pickling to and from a child process
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self) -> str:
        return "RELEASE"

    def __repr__(self) -> str:
        return "prescient.RELEASE"


#: What a check returns to hand its claim back (Metafora's Release): no run, failure or check is
#: counted, and the job is due again at the next slot (a paused job stays paused).
RELEASE = Released()


@dataclass(frozen=True)
class Check:
    """A registered check: its name, its function, the model it is about and its overrides."""

    name: str
    func: Callable[..., Any]
    model_label: str | None = None
    timeout_seconds: float | None = None
    max_checks: int | None = None
    horizon_days: float | None = None
    max_retries: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    #: The kind of the jobs it makes (see prescient.engine.kind).
    kind: str = "check"
    #: What follows a failed run of this check (None: the ``ERROR_HANDLER`` setting).
    error_handler: ErrorHandler | None = None
    #: At most this many of its runs at once in one worker child (1: code that is not
    #: thread-safe); None: as many as the child has lanes.
    lanes: int | None = None
    #: The queue its jobs are in (``prescient_worker --queue``); "" is the queue of checks.
    queue: str = ""
    #: At most so many runs at once per key, and so many started per period per key, across
    #: every worker (:mod:`prescient.limits`).
    limit: Limit | None = None
    rate: Rate | None = None
    #: Its jobs' runs start this far into their slot at most, each at a fixed offset derived from
    #: its entity (a slot's herd spread over the slot); None: at the slot's start.
    spread: timedelta | None = None

    def spread_at(self, due: datetime, entity_name: str, entity_key: str) -> datetime:
        """Where a run due at ``due`` starts: at its entity's offset into the slot when the
        check spreads its slot, else at ``due``."""
        if self.spread is None:
            return due
        slot_minutes = int(setting("SLOT_MINUTES"))
        width = min(self.spread, timedelta(minutes=slot_minutes))  # True: the whole slot
        offset = slots.spread_offset(f"{self.name}:{entity_name}:{entity_key}", width)
        return slots.at_offset(due, slot_minutes, offset)

    @property
    def model(self) -> type[models.Model] | None:
        """The model class this check is about (resolved when first asked, after apps load)."""
        if self.model_label is None:
            return None
        return apps.get_model(self.model_label)

    @property
    def timeout(self) -> float:
        return float(self.timeout_seconds if self.timeout_seconds is not None else setting("TIMEOUT_SECONDS"))

    @property
    def checks_allowed(self) -> int:
        return int(self.max_checks if self.max_checks is not None else setting("MAX_CHECKS"))

    @property
    def horizon(self) -> timedelta:
        days = self.horizon_days if self.horizon_days is not None else setting("HORIZON_DAYS")
        return timedelta(days=float(days))

    @property
    def retries_allowed(self) -> int:
        return int(self.max_retries if self.max_retries is not None else setting("MAX_RETRIES"))


_registry: dict[str, Check] = {}


def _model_label(model: str | type[models.Model] | None) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        if model.count(".") != 1:
            raise ValueError(f"model must be 'app_label.ModelName', got {model!r}")
        return model.lower()
    return model._meta.label_lower


def check(
    name: str,
    model: str | type[models.Model] | None = None,
    *,
    timeout_seconds: float | None = None,
    max_checks: int | None = None,
    horizon_days: float | None = None,
    max_retries: int | None = None,
    error_handler: ErrorHandler | None = None,
    lanes: int | None = None,
    queue: str = "",
    limit: Limit | None = None,
    rate: Rate | None = None,
    spread: bool | timedelta = False,
) -> Callable[[F], F]:
    """Register the decorated function as the check ``name``.

    The function (plain or ``async def``) is called as ``func(instance, job)`` and returns
    ``None`` (done), a timedelta or an aware datetime (check again then). ``model``
    (``"app.Model"`` or the class) is the model whose instances it is about; the keyword
    arguments override the ``PRESCIENT`` settings for this check alone (``error_handler``: a
    callable, e.g. ``prescient.errors.error_rate()``, in place of ``ERROR_HANDLER``).
    ``lanes``: at most this many of its runs at once in one worker child (``lanes=1`` for code
    that is not thread-safe). ``queue``: its jobs' queue, served by ``prescient_worker --queue``
    (default ``""``, the queue of checks). ``limit`` (:class:`prescient.Limit`) and ``rate``
    (:class:`prescient.Rate`): at most so many runs at once, and started per period, per key,
    across every worker and host. ``spread``: ``True`` (or a timedelta up to the slot's length)
    starts each job's runs at a fixed offset into their slot, derived from its entity, so that a
    slot's herd is spread over the slot rather than all started at its boundary.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("A check needs a non-empty name")
    label = _model_label(model)
    if error_handler is not None and not callable(error_handler):
        raise TypeError(f"error_handler must be callable, got {type(error_handler).__name__}")
    if lanes is not None and (isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1):
        raise ValueError(f"lanes must be a whole number of at least 1, got {lanes!r}")
    if not isinstance(queue, str) or len(queue) > 100 or queue != queue.strip() or "," in queue:
        raise ValueError(f"queue must be a name of at most 100 characters, no commas nor edge spaces; got {queue!r}")
    if limit is not None and not isinstance(limit, Limit):
        raise TypeError(f"limit must be a prescient.Limit, got {type(limit).__name__}")
    if rate is not None and not isinstance(rate, Rate):
        raise TypeError(f"rate must be a prescient.Rate, got {type(rate).__name__}")
    spread_by = _spread(spread)

    def decorator(func: F) -> F:
        entry = Check(
            name=name,
            func=func,
            model_label=label,
            timeout_seconds=timeout_seconds,
            max_checks=max_checks,
            horizon_days=horizon_days,
            max_retries=max_retries,
            error_handler=error_handler,
            lanes=lanes,
            queue=queue,
            limit=limit,
            rate=rate,
            spread=spread_by,
        )
        existing = _registry.get(name)
        if existing is not None and _identity(existing.func) != _identity(func):
            raise AlreadyRegistered(
                f"Check {name!r} is already registered to {_identity(existing.func)}; "
                f"cannot register {_identity(func)} under the same name"
            )
        _registry[name] = entry
        limits.declare(name, limit, rate)
        func.prescient_check = entry  # type: ignore[attr-defined]
        return func

    return decorator


def _spread(spread: bool | timedelta) -> timedelta | None:
    """``spread=`` as a timedelta (True: the whole slot, read when used), or None."""
    if spread is False or spread is None:
        return None
    if spread is True:
        return timedelta(minutes=MINUTES_PER_DAY)  # at most the slot: at_offset keeps it inside
    if not isinstance(spread, timedelta) or spread <= timedelta(0):
        raise ValueError(f"spread must be True, False or a positive timedelta, got {spread!r}")
    return spread


def _identity(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def get_check(ref: str | Callable[..., Any] | Check) -> Check:
    """The registered check for a name, a decorated function or a Check; UnknownCheck otherwise."""
    if isinstance(ref, Check):
        return ref
    if callable(ref):
        entry = getattr(ref, "prescient_check", None)
        if isinstance(entry, Check) and _registry.get(entry.name) is entry:
            return entry
        raise UnknownCheck(_identity(ref), _registry)
    try:
        return _registry[ref]
    except (KeyError, TypeError):
        raise UnknownCheck(ref, _registry) from None


def schedulable(ref: str | Callable[..., Any] | Check) -> Check:
    """The registered check for ``ref``, as :func:`get_check`, that ``schedule()`` may start:
    an expectation (its name or its handler) is refused (:class:`WrongKind`): its jobs start
    with ``expect()``, which gives them their rungs; scheduled as a check, its job would fail at
    every run."""
    expectation = getattr(ref, "prescient_expectation", None) if callable(ref) else None
    name = getattr(expectation, "name", None) or get_check(ref).name
    if expectation is not None or get_check(name).kind == "expectation":
        raise WrongKind(
            f"{name!r} is an expectation, not a check: start it for an instance with "
            f"prescient.expect(instance, {name!r})"
        )
    return get_check(ref)


def registered() -> Iterator[Check]:
    """Every registered check, by name."""
    for name in sorted(_registry):
        yield _registry[name]


def add(entry: Check) -> None:
    """Register a ready-made Check under its name, replacing any (used by other kinds of job)."""
    _registry[entry.name] = entry
    limits.declare(entry.name, entry.limit, entry.rate)


def unregister(name: str) -> None:
    """Forget a check (for tests and reloads)."""
    _registry.pop(name, None)
    limits.forget(name)
