"""The claim of jobs held by limits and rates per key (:mod:`prescient.limits`): the database says
which keys have room, so that every worker and host keeps one limit.

Only where some check declares a limit or rate (else the claim is as it always was). Such jobs
carry their keys (``limit_key``, ``rate_key``) and are claimed apart from the others, in one
transaction:

1. the runs in flight per limit key are counted (the ``prescient_job_limit_in_flight`` index),
   and the keys with no room left are set aside;
2. the due jobs of the other keys are picked in claim order (``FOR UPDATE SKIP LOCKED`` on
   PostgreSQL: concurrent claims take disjoint jobs);
3. their keys are locked, in one order (``pg_advisory_xact_lock`` on PostgreSQL; SQLite's
   writers are one at a time), then counted again and their rate buckets refilled: what another
   claim took meanwhile is seen;
4. as many jobs as each key has room for are taken, the buckets written, the jobs claimed.

A job held back stays due, untouched: not a run, not a failure, not a retry. A run holds its
place under its limit from its claim until its result is written (or its claim is rescued),
so a worker that dies never lets a limit be exceeded: its runs count until they are reclaimed.
"""

from __future__ import annotations

import zlib
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from prescient import limits
from prescient.clock import db_clock, db_now
from prescient.models import FutureJob, RateBucket
from prescient.states import State

#: The first of the two keys of a limit key's advisory lock ("limt").
LOCK_CLASS = 0x6C696D74
#: Candidates looked at per job wanted: keys with room may sit behind others' jobs.
LOOK_AHEAD = 4

UNLIMITED = Q(limit_key="", rate_key="")


#: Seconds after which a job held back by a limit is looked at again, where no wake-up came
#: sooner (a run under its limit that ends wakes idle workers: see store.settle).
LIMIT_RETRY_SECONDS = 0.25


def claim(
    due: QuerySet[FutureJob], size: int, token: str, state: str, held: list[float] | None = None
) -> list[FutureJob]:
    """Claim up to ``size`` jobs with limited keys from ``due`` (the claim's queryset of due
    jobs, in claim order) under ``token``; returns them. ``held`` gets, when jobs were held back,
    the seconds after which one of them may have room (a rate's next token)."""
    with transaction.atomic():
        full = limits.keys_at_capacity(limits.in_flight())
        # Keys with no room, of limits and of rates, are set aside before picking: a backlog
        # held back must not hide the due jobs of other keys behind it.
        empty = limits.empty_rates(db_now()) if limits.rates_declared() else []
        candidates = due.exclude(UNLIMITED)
        if full or empty:
            if held is not None and candidates.filter(Q(limit_key__in=full) | Q(rate_key__in=empty)).exists():
                held.append(LIMIT_RETRY_SECONDS)
            candidates = candidates.exclude(limit_key__in=full).exclude(rate_key__in=empty)
        if connection.features.has_select_for_update_skip_locked:
            candidates = candidates.select_for_update(skip_locked=True)
        picked = list(candidates.values_list("pk", "limit_key", "rate_key")[: size * LOOK_AHEAD])
        if not picked:
            return []
        limit_keys = sorted({key for _, key, _ in picked if key})
        rate_keys = sorted({key for _, _, key in picked if key})
        _lock(sorted(set(limit_keys) | set(rate_keys)))
        running = limits.in_flight(limit_keys)
        tokens, counted_at = _buckets(rate_keys)
        taken: list[int] = []
        for pk, limit_key, rate_key in picked:
            if len(taken) >= size:
                break
            limit = limits.limit_named(limits.name_of(limit_key)) if limit_key else None
            if limit is not None and running[limit_key] >= limit.running:
                if held is not None:
                    held.append(LIMIT_RETRY_SECONDS)
                continue
            if rate_key and rate_key in tokens and tokens[rate_key] < 1:
                rate = limits.rate_named(limits.name_of(rate_key))
                if held is not None and rate is not None:
                    held.append((1 - tokens[rate_key]) / rate.per_second)  # its next token
                continue
            taken.append(pk)
            if limit_key:
                running[limit_key] += 1
            if rate_key in tokens:
                tokens[rate_key] -= 1
        for key, left in tokens.items():
            RateBucket.objects.filter(key=key).update(tokens=left, refilled_at=counted_at)
        if not taken:
            return []
        clock = db_clock()
        FutureJob.objects.filter(pk__in=taken, state=State.SCHEDULED).update(
            state=state, reserved_at=clock, reserved_by=token, run_started_at=clock if state == State.RUNNING else None
        )
    return list(FutureJob.objects.filter(pk__in=taken, reserved_by=token))


def _lock(keys: list[str]) -> None:
    """Hold each key until the transaction ends, one after the other in one order (PostgreSQL;
    elsewhere the write transaction holds the database)."""
    if connection.vendor != "postgresql" or not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock(%s, h)) FROM unnest(%s::int[]) AS h",
            [LOCK_CLASS, sorted({zlib.crc32(key.encode()) - 2**31 for key in keys})],
        )


def _buckets(keys: list[str]) -> tuple[dict[str, float], datetime]:
    """The tokens of each rate key, refilled to the database's time (returned too: a rate is
    about real time, whatever ``now`` a replay claims at); a new key starts full."""
    if not keys:
        return {}, timezone.now()  # nothing to count: no statement
    now = db_now()
    rates = {key: limits.rate_named(limits.name_of(key)) for key in keys}
    known = {key: rate for key, rate in rates.items() if rate is not None}
    found = {bucket.key: bucket for bucket in RateBucket.objects.filter(key__in=list(known))}
    missing = [RateBucket(key=key, tokens=float(rate.runs), refilled_at=now) for key, rate in known.items()
               if key not in found]
    if missing:
        RateBucket.objects.bulk_create(missing, ignore_conflicts=True)
        found.update({bucket.key: bucket for bucket in RateBucket.objects.filter(key__in=[b.key for b in missing])})
    tokens = {}
    for key, rate in known.items():
        bucket = found[key]
        tokens[key] = limits.refill(bucket.tokens, (now - bucket.refilled_at).total_seconds(), rate)
    return tokens, now
