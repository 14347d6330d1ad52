"""The metrics' running totals (:class:`prescient.tallies.MetricTally`), added to in the caller's
transaction: a settled batch's runs (:class:`RunTally`), jobs that ended, rescued claims.

Each write is one ``INSERT … ON CONFLICT DO UPDATE SET value = value + excluded.value`` of
every figure the caller counted, in key order (two transactions adding to the same rows take
their locks in the same order: no deadlock), to the shard of this process. While a batch
settles, the jobs it ends are counted with its runs (:meth:`RunTally.collecting`): one such
statement per settled batch, its last.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

from django.db import connection

from prescient.models import FutureJob, JobHistory
from prescient.tallies import DURATION_BUCKETS, LAG_BUCKETS, SHARDS, MetricTally, bucket

from ..decisions import RETRIED, Decision

#: ``(check, queue, figure)``
Key = tuple[str, str, str]

#: The tally of the batch settling in this context, if any (see :meth:`RunTally.collecting`).
_settling: ContextVar[RunTally | None] = ContextVar("prescient_settling_tally", default=None)


def add(counts: Mapping[Key, float]) -> None:
    """Add ``counts`` to the running totals (in the caller's transaction)."""
    rows = sorted((key, value) for key, value in counts.items() if value)
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(MetricTally._meta.db_table)
    columns = ", ".join(qn(name) for name in ("job_exec", "queue", "name", "shard", "value"))
    key = ", ".join(qn(name) for name in ("job_exec", "queue", "name", "shard"))
    value = qn("value")
    shard = os.getpid() % SHARDS
    params: list[str | int | float] = []
    for (job_exec, queue, name), amount in rows:
        params.extend([job_exec, queue, name, shard, float(amount)])
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES {', '.join(['(%s, %s, %s, %s, %s)'] * len(rows))} "
        f"ON CONFLICT ({key}) DO UPDATE SET {value} = {table}.{value} + excluded.{value}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


class RunTally:
    """What one settled batch adds: per run, its result, duration and start lag (and a retry)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.counts: defaultdict[Key, float] = defaultdict(float)

    def run(self, job: FutureJob, result: str, decision: Decision) -> None:
        """Count ``decision``'s run of ``job`` (nothing if the job's code was not called), which
        led to ``result``: an outcome, or ``rescheduled``, ``retried``, ``slept`` ..."""
        if not decision.ran:
            return
        check, queue = job.job_exec, job.queue
        counts = self.counts
        counts[check, queue, f"runs:{result}"] += 1
        if result == RETRIED:
            counts[check, queue, "retries"] += 1
        seconds = max(decision.seconds, 0.0)
        counts[check, queue, f"duration_le:{bucket(seconds, DURATION_BUCKETS)}"] += 1
        counts[check, queue, "duration_sum"] += seconds
        # Due time → start: the run started ``seconds`` before it was settled, if the claim's
        # own stamp is not at hand. The due time is the claimed row's (``decision.job``).
        due = decision.job.next_check_at
        started = decision.job.run_started_at or job.run_started_at
        lag = max(((started or self.now) - due).total_seconds() - (seconds if started is None else 0.0), 0.0)
        counts[check, queue, f"lag_le:{bucket(lag, LAG_BUCKETS)}"] += 1
        counts[check, queue, "lag_sum"] += lag

    def add(self, counts: Mapping[Key, float]) -> None:
        for key, value in counts.items():
            self.counts[key] += value

    @contextmanager
    def collecting(self) -> Iterator[RunTally]:
        """While inside, jobs that end are counted here too, not written at once."""
        token = _settling.set(self)
        try:
            yield self
        finally:
            _settling.reset(token)

    def write(self) -> None:
        add(self.counts)
        self.counts = defaultdict(float)


def count_endings(rows: Iterable[JobHistory]) -> None:
    """Count the jobs that ended, per outcome (their history rows are being inserted)."""
    counts = Counter((row.job_exec, row.queue, f"outcomes:{row.outcome}") for row in rows)
    settling = _settling.get()
    if settling is not None:
        settling.add(counts)
    else:
        add(counts)


def count_rescues(rescued: Iterable[tuple[FutureJob, str]]) -> None:
    """Count the stale claims the rescuer dealt with, each ``(job, action)``: ``reclaimed``,
    ``handed_back``, ``buried``, ``slept``, ``ended`` or ``failed`` (one statement)."""
    add(Counter((job.job_exec, job.queue, f"rescues:{action}") for job, action in rescued))
