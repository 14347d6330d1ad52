"""Limits and rates per key, held by the database across every worker and host (issue #33).

    @prescient.check("shop.label", model="shop.Order",
                     limit=prescient.Limit(running=2, key="customer_id"),
                     rate=prescient.Rate(runs=10, per=timedelta(seconds=1), name="carrier"))

``Limit(running=N)``: at most N runs with the same key at once. ``Rate(runs=N, per=period)``: at
most N runs started per period with the same key (a token bucket of N, refilled at N per
period, kept in a row of the database; no Redis). The key is read from the job's entity when
the job is scheduled: ``key=None`` (the default) is the check itself (one key for all its
jobs), a string is a field path of the entity (``"customer_id"``, ``"carrier__code"``), a
callable is called as ``key(entity_name, entity_key)`` and returns a string. A limit's
``name`` (default: the check's) is shared by every check that gives it: two checks that call
one carrier's API share its rate.

The job keeps its keys (``limit_key``, ``rate_key``: ``<name>:<value>``); the claim asks the
database which keys have room (:mod:`prescient.engine.store.limited`). A job held back stays
due: not a run, not a failure, not a retry. A host that declares no limit pays nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ObjectDoesNotExist

#: A key: None (the check itself), a field path of the entity, or ``key(entity_name, entity_key)``.
KeySpec = str | Callable[[str, str], Any] | None

#: The longest key kept (the column's width, with its name).
KEY_LENGTH = 255


@dataclass(frozen=True)
class Limit:
    """At most ``running`` runs with the same key at once, across every worker and host."""

    running: int
    key: KeySpec = None
    name: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.running, bool) or not isinstance(self.running, int) or self.running < 1:
            raise ValueError(f"Limit(running=...) must be a whole number of at least 1, got {self.running!r}")
        _check_key(self.key, self.name, "Limit")


@dataclass(frozen=True)
class Rate:
    """At most ``runs`` runs started per ``per`` with the same key (a token bucket of ``runs``)."""

    runs: int
    per: timedelta
    key: KeySpec = None
    name: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1:
            raise ValueError(f"Rate(runs=...) must be a whole number of at least 1, got {self.runs!r}")
        if not isinstance(self.per, timedelta) or self.per <= timedelta(0):
            raise ValueError(f"Rate(per=...) must be a positive timedelta, got {self.per!r}")
        _check_key(self.key, self.name, "Rate")

    @property
    def per_second(self) -> float:
        """Tokens added per second."""
        return self.runs / self.per.total_seconds()


def _check_key(key: Any, name: Any, what: str) -> None:
    if key is not None and not isinstance(key, str) and not callable(key):
        raise TypeError(f"{what}(key=...) must be None, a field path or a callable, got {type(key).__name__}")
    if isinstance(key, str) and not key.strip():
        raise ValueError(f"{what}(key=...) must not be empty")
    if name is not None and (not isinstance(name, str) or not name.strip() or ":" in name):
        raise ValueError(f"{what}(name=...) must be a non-empty name without ':', got {name!r}")


_lock = threading.Lock()
#: Every limit and rate declared, by name: what the claim applies to a job's key.
_limits: dict[str, Limit] = {}
_rates: dict[str, Rate] = {}
#: Which checks declared each name (a name is forgotten with the last of them).
_users: dict[str, set[str]] = {}


def declare(check_name: str, limit: Limit | None, rate: Rate | None) -> None:
    """Know the limit and rate of the check ``check_name`` by their names (a name given twice
    with different numbers: the last one wins; ``manage.py check`` reports it)."""
    with _lock:
        _forget(check_name)
        if limit is not None:
            _limits[limit.name or check_name] = limit
            _users.setdefault(f"limit:{limit.name or check_name}", set()).add(check_name)
        if rate is not None:
            _rates[rate.name or check_name] = rate
            _users.setdefault(f"rate:{rate.name or check_name}", set()).add(check_name)


def declared() -> bool:
    """Whether any limit or rate is declared: when none is, the claim is as it always was."""
    return bool(_limits or _rates)


def rates_declared() -> bool:
    """Whether any rate is declared (the claim then looks at the buckets)."""
    return bool(_rates)


def limit_named(name: str) -> Limit | None:
    return _limits.get(name)


def rate_named(name: str) -> Rate | None:
    return _rates.get(name)


def forget(check_name: str) -> None:
    """Forget what ``check_name`` declared (tests, reloads): a name no other check gives is gone."""
    with _lock:
        _forget(check_name)


def _forget(check_name: str) -> None:
    for used, users in list(_users.items()):
        users.discard(check_name)
        if not users:
            del _users[used]
            kind, _, name = used.partition(":")
            (_limits if kind == "limit" else _rates).pop(name, None)


def name_of(key: str) -> str:
    """The limit's name in a job's key (``<name>:<value>``)."""
    return key.partition(":")[0]


def key_of(spec: Limit | Rate | None, check_name: str, entity: Any, entity_name: str, entity_key: str) -> str:
    """A job's key for ``spec`` (``""``: no such limit), from its entity when it is scheduled.

    ``entity`` is the model instance when the caller has it (else None, and a field path is
    read from the database by the entity's key)."""
    if spec is None:
        return ""
    name = spec.name or check_name
    how = spec.key
    if how is None:
        value: Any = check_name
    elif callable(how):
        value = how(entity_name, entity_key)
    else:
        value = _field(entity, entity_name, entity_key, how)
    return f"{name}:{value}"[:KEY_LENGTH]


def keys_of_many(
    spec: Limit | Rate | None, check_name: str, entity_name: str, entity_keys: list[str]
) -> dict[str, str]:
    """``{entity key: job's key}`` for many entities of one model at once (a field path is read
    for all of them in one query)."""
    if spec is None:
        return dict.fromkeys(entity_keys, "")
    if not isinstance(spec.key, str):
        return {key: key_of(spec, check_name, None, entity_name, key) for key in entity_keys}
    from django.apps import apps

    name = spec.name or check_name
    model = apps.get_model(entity_name)
    rows = model._default_manager.filter(pk__in=entity_keys).values_list("pk", spec.key)
    found = {str(pk): value for pk, value in rows}
    return {key: f"{name}:{'' if found.get(key) is None else found[key]}"[:KEY_LENGTH] for key in entity_keys}


def _field(entity: Any, entity_name: str, entity_key: str, path: str) -> Any:
    """The value at ``path`` (``a__b``) of the entity: read from the instance, else fetched."""
    if entity is not None:
        value = entity
        for part in path.split("__"):
            value = getattr(value, part, None)
            if value is None:
                return ""
        return getattr(value, "pk", value)
    from django.apps import apps

    try:
        model = apps.get_model(entity_name)
        return model._default_manager.filter(pk=entity_key).values_list(path, flat=True).get()
    except (LookupError, ValueError, FieldDoesNotExist, ObjectDoesNotExist):
        return ""


def refill(tokens: float, seconds: float, rate: Rate) -> float:
    """A bucket's tokens after ``seconds`` (never more than ``rate.runs``: the burst)."""
    return min(float(rate.runs), tokens + max(0.0, seconds) * rate.per_second)


def keys_at_capacity(running: dict[str, int]) -> set[str]:
    """Of ``{limit key: runs in flight}``, the keys with no room left."""
    full = set()
    for key, count in running.items():
        limit = _limits.get(name_of(key))
        if limit is not None and count >= limit.running:
            full.add(key)
    return full


def why_held(limit_key: str, rate_key: str, running: dict[str, int], tokens: dict[str, float]) -> str:
    """Why a due job with these keys is held back (``""``: it is not), in words."""
    if limit_key:
        limit = _limits.get(name_of(limit_key))
        if limit is not None and running.get(limit_key, 0) >= limit.running:
            return f"held by limit {limit_key} ({running[limit_key]} of {limit.running} running)"
    if rate_key:
        rate = _rates.get(name_of(rate_key))
        if rate is not None and tokens.get(rate_key, float(rate.runs)) < 1:
            return f"held by rate {rate_key} ({rate.runs} per {_period(rate.per)})"
    return ""


def _period(per: timedelta) -> str:
    seconds = per.total_seconds()
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"




# --- what holds jobs back now (reads, for the admin, the API, the commands and the metrics) ------


def in_flight(keys: list[str] | None = None) -> Counter[str]:
    """Runs claimed and not yet written, per limit key (of ``keys`` only, if given): every job
    with a claim, whatever its state (a running job paused by a person still runs); one query
    answered by the ``prescient_job_limit_in_flight`` index."""
    from django.db.models import Count

    from .models import FutureJob

    rows = FutureJob.objects.exclude(reserved_by="").exclude(limit_key="")
    if keys is not None:
        rows = rows.filter(limit_key__in=keys)
    return Counter(dict(rows.order_by().values_list("limit_key").annotate(n=Count("pk")).values_list("limit_key", "n")))


def empty_rates(clock: datetime) -> list[str]:
    """The rate keys with no token left at ``clock``: one query over the buckets that were
    short at their last count (the others are full, or refill to full)."""
    from .models import RateBucket

    empty = []
    for bucket in RateBucket.objects.filter(tokens__lt=1):
        rate = _rates.get(name_of(bucket.key))
        if rate is not None and refill(bucket.tokens, (clock - bucket.refilled_at).total_seconds(), rate) < 1:
            empty.append(bucket.key)
    return empty


def tokens_left(rate_keys: list[str], clock: datetime) -> dict[str, float]:
    """The tokens each rate key has at ``clock`` (a key never used has its whole burst)."""
    from .models import RateBucket

    tokens: dict[str, float] = {}
    for bucket in RateBucket.objects.filter(key__in=rate_keys):
        rate = _rates.get(name_of(bucket.key))
        if rate is not None:
            tokens[bucket.key] = refill(bucket.tokens, (clock - bucket.refilled_at).total_seconds(), rate)
    return tokens


def holding(jobs: list[Any], now: datetime, clock: datetime | None = None) -> dict[int, str]:
    """Why each job of ``jobs`` that is due at ``now`` is held back by a limit or rate, in words
    (absent: it is not); ``clock`` is the database's time (rates are about real time). Nothing
    is read when no limit is declared or none of the jobs has a key."""
    from .states import State

    limited = [job for job in jobs if (job.limit_key or job.rate_key) and job.state == State.SCHEDULED
               and job.next_check_at <= now]
    if not limited or not declared():
        return {}
    running = in_flight(sorted({job.limit_key for job in limited if job.limit_key}))
    rate_keys = sorted({job.rate_key for job in limited if job.rate_key})
    tokens = tokens_left(rate_keys, clock or now) if rate_keys else {}
    found = {}
    for job in limited:
        why = why_held(job.limit_key, job.rate_key, running, tokens)
        if why:
            found[job.pk] = why
    return found


def held_counts(now: datetime, clock: datetime | None = None) -> dict[str, int]:
    """How many due jobs each limit or rate (by name) holds back at ``now``; {} when none is
    declared (nothing is read)."""
    counts: Counter[str] = Counter()
    for _, limit_key, rate_key, n, why in _held_groups(now, clock):
        counts[name_of(limit_key if why.startswith("held by limit") else rate_key)] += n
    return dict(counts)


def held_per_check(
    now: datetime, clock: datetime | None = None, names: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """Per check (of ``names`` only, if given), how many of its due jobs each limit or rate (by
    name) holds back at ``now``: ``{check: {limit or rate: jobs}}``; {} when none is declared
    (nothing is read). The same judgement as :func:`held_counts`, in as many queries."""
    found: dict[str, Counter[str]] = {}
    for check, limit_key, rate_key, n, why in _held_groups(now, clock, by_check=True, names=names):
        held_by = name_of(limit_key if why.startswith("held by limit") else rate_key)
        found.setdefault(check, Counter())[held_by] += n
    return {check: dict(counts) for check, counts in found.items()}


def _held_groups(
    now: datetime, clock: datetime | None, *, by_check: bool = False, names: list[str] | None = None
) -> list[tuple[str, str, str, int, str]]:
    """The due jobs with a key, grouped by their keys (and check, ``by_check``), that a full
    limit or an empty rate bucket holds back at ``now``: ``(check or "", limit key, rate key,
    jobs, why)``. Three queries at most (the groups, the runs in flight, the buckets); none
    when nothing is declared."""
    if not declared():
        return []
    from django.db.models import Count, Value

    from .models import FutureJob

    due = FutureJob.objects.due(now).exclude(limit_key="", rate_key="").order_by()
    if names is not None:
        due = due.filter(job_exec__in=names)
    check = "job_exec" if by_check else Value("")
    groups = list(due.values_list(check, "limit_key", "rate_key").annotate(n=Count("pk")))
    if not groups:
        return []
    running = in_flight(sorted({limit_key for _, limit_key, _, _ in groups if limit_key}))
    rate_keys = sorted({rate_key for _, _, rate_key, _ in groups if rate_key})
    tokens = tokens_left(rate_keys, clock or now) if rate_keys else {}
    held = []
    for name, limit_key, rate_key, n in groups:
        why = why_held(limit_key, rate_key, running, tokens)
        if why:
            held.append((name, limit_key, rate_key, n, why))
    return held


# --- django.tasks: limits per task path or queue (a backend's OPTIONS["LIMITS"]) ------------------

TaskLimits = dict[str, tuple[Limit | None, Rate | None]]


def task_limits(options: dict[str, Any]) -> TaskLimits:
    """The ``LIMITS`` of a task backend's OPTIONS (checked by ``conf.OPTIONS_RULES``), declared
    by name: ``{"<task path>" or "queue:<name>": (Limit, Rate)}``. Each has one key, shared by
    every run of that task path or queue."""
    found: TaskLimits = {}
    for name, spec in (options.get("LIMITS") or {}).items():
        called = name.replace(":", "/")  # a limit's name has no ':' (its keys are <name>:<value>)
        limit = Limit(running=spec["running"], key=_one_key, name=called) if "running" in spec else None
        rate = (Rate(runs=spec["runs"], per=timedelta(seconds=spec["per_seconds"]), key=_one_key, name=called)
                if "runs" in spec else None)
        declare(f"tasks:{name}", limit, rate)
        found[name] = (limit, rate)
    return found


def _one_key(entity_name: str, entity_key: str) -> str:
    return "*"


def task_keys(module_path: str, queue: str, declared: TaskLimits) -> tuple[str, str]:
    """A new task job's ``(limit_key, rate_key)``: by its task path, else by its queue."""
    limit, rate = declared.get(module_path) or declared.get(f"queue:{queue}") or (None, None)
    return key_of(limit, "", None, "", ""), key_of(rate, "", None, "", "")
