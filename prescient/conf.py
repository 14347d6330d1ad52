"""prescient's settings: one ``PRESCIENT`` dict in the host's settings, read at call time."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Length of a time slot. Due times round up to a slot boundary (aligned to the UTC epoch).
    "SLOT_MINUTES": 15,
    # Longest a single check may run before it is stopped and counted as a failed run.
    "TIMEOUT_SECONDS": 60,
    # How many times one job may be re-scheduled by its check.
    "MAX_CHECKS": 5,
    # A next check further ahead than this ends the job (outcome ``horizon``).
    "HORIZON_DAYS": 30,
    # Failed runs tolerated before the job ends with outcome ``failed``.
    "MAX_RETRIES": 3,
    # Jobs claimed per batch by a tick.
    "BATCH_SIZE": 100,
    # A reservation older than this is presumed lost with its worker (None: timeout + 60 s).
    "STALE_AFTER_SECONDS": None,
    # Dotted path of the callable that decides what follows a failed run.
    "ERROR_HANDLER": "prescient.retries.retry_next_slot",
    # Errors kept on a job (oldest dropped first).
    "RECENT_ERRORS": 10,
    # prescient_worker: how often it heart-beats and renews the leases of its claims.
    "WORKER_HEARTBEAT_SECONDS": 5,
    # prescient_worker without LISTEN/NOTIFY (SQLite): how often it looks for due work.
    "WORKER_POLL_SECONDS": 1.0,
    # prescient_worker on SIGTERM/SIGINT: how long runs in flight may take to finish.
    "WORKER_GRACE_SECONDS": 30,
    # prescient_worker: jobs claimed beyond its idle children (0: a job is claimed only when a
    # child is free to start it at once).
    "WORKER_PREFETCH": 0,
    # prescient_worker: the address space of each child, in MB (None: no limit). A run that goes
    # over it is a failed run; the child goes on.
    "CHILD_MEMORY_MB": None,
    # prescient_worker: runs after which a child is replaced by a fresh one (None: never).
    "CHILD_MAX_RUNS": None,
    # Days a JobHistory row is kept after its job finished, per outcome ("*": every outcome not
    # named; an outcome that is absent without "*", or given None, is kept forever). None: every
    # row is kept forever. Pruned by the upkeep service history_pruner and prescient_prune.
    "HISTORY_RETENTION_DAYS": {"completed": 14, "*": 90},
}


def setting(name: str) -> Any:
    """Return one prescient setting, the host's value over the default."""
    if name not in DEFAULTS:
        raise KeyError(f"Unknown prescient setting {name!r}")
    return {**DEFAULTS, **getattr(settings, "PRESCIENT", {})}[name]


def stale_after_seconds() -> float:
    """Seconds after which a reservation is presumed lost."""
    value = setting("STALE_AFTER_SECONDS")
    if value is None:
        return float(setting("TIMEOUT_SECONDS")) + 60.0
    return float(value)
