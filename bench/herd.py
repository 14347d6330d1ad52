"""A slot boundary as a thundering herd: N checks due in the same slot among M pending.

Rounding due times up to slots gathers work at :00, :15, :30 and :45; a busy system meets a
herd of 100,000 due checks at once. Two idle workers (one child each) are woken by the herd;
measured while they drain it: jobs per second, the longest transaction any backend held
(sampled from ``pg_stat_activity`` every 20 ms), and what the idle tick's one query costs
meanwhile. The same herd with nothing else pending is the baseline (target: at least 0.8 of its
rate). PostgreSQL only.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import timedelta
from types import ModuleType
from typing import Any

from django.db import connection, transaction
from django.utils import timezone


class Sampler(threading.Thread):
    """Samples, on a connection of its own, the longest open transaction of the other backends
    and the time of the idle tick's query (the survey)."""

    def __init__(self, S: ModuleType) -> None:
        super().__init__(name="bench-herd-sampler", daemon=True)
        self.S = S
        self.stop = threading.Event()
        self.longest = 0.0
        self.survey: list[float] = []

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                while not self.stop.wait(0.02):
                    cursor.execute(
                        "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
                        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND xact_start IS NOT NULL AND state <> 'idle'"
                    )
                    self.longest = max(self.longest, float(cursor.fetchone()[0]))
                    started = time.perf_counter()
                    self.S.engine_sweep.survey()
                    self.survey.append(time.perf_counter() - started)
        finally:
            connection.close()


def drain(S: ModuleType, due: int, *, sample: bool) -> tuple[float, Sampler | None]:
    """Two idle workers, then ``due`` jobs made due at once (one statement, one NOTIFY);
    jobs per second until every one has run (and the sampler, if asked)."""
    S.ensure_items(due)
    with S.workers(2):
        sampler = Sampler(S) if sample else None
        if sampler is not None:
            sampler.start()
        now = timezone.now()
        with transaction.atomic():
            S.add_jobs(1, due, now - timedelta(minutes=15))
            S.notify()
        started = time.perf_counter()
        ended = S.wait_swept(timeout=1800)
        if sampler is not None:
            sampler.stop.set()
            sampler.join(10)
    ran = S.q("SELECT count(*) FROM prescient_jobhistory")[0][0] + S.q(
        "SELECT count(*) FROM prescient_futurejob WHERE check_count = 1")[0][0]
    if ran != due:
        raise RuntimeError(f"the workers ran {ran} of {due} jobs")
    return due / (ended - started), sampler


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    due, pending, runs = sizes["herd_due"], sizes["herd_pending"], min(sizes["runs"], 2)
    for _run in range(runs):
        S.clear_jobs()
        S.vacuum("prescient_futurejob", "prescient_jobhistory")
        alone, _ = drain(S, due, sample=False)
        res.add("herd.alone", alone)
        S.clear_jobs()
        S.log(f"herd: loading {pending:,} pending jobs")
        S.add_jobs(S.BASE_KEY, pending, timezone.now() + timedelta(days=7))
        S.vacuum("prescient_futurejob", "prescient_jobhistory")
        rate, sampler = drain(S, due, sample=True)
        assert sampler is not None
        res.add("herd.among", rate)
        res.add("herd.longest_transaction", sampler.longest)
        res.add("herd.survey", statistics.median(sampler.survey) if sampler.survey else 0.0)
        res.add("herd.drain_seconds", due / rate)
        S.log(f"herd: {due:,} due at once among {pending:,}: {rate:,.0f}/s (alone {alone:,.0f}/s), "
              f"longest transaction {sampler.longest * 1e3:.0f} ms, the idle tick's query "
              f"{statistics.median(sampler.survey) * 1e3 if sampler.survey else 0:.2f} ms meanwhile")
    S.clear_jobs()
