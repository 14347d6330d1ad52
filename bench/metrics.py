"""A Prometheus scrape of ``GET /prescient/metrics`` with a million pending jobs and a million
history rows (issue #17: under 50 ms).

The jobs (1,000 of them due a slot ago, the rest in a week) and the history rows (finished over
the last 7 days, outcomes mixed, so about 6,000 in the last hour) are inserted with
``generate_series``, then vacuumed as autovacuum would. Timed: the view function itself, called
with a request that carries a bearer token (its lookup included), as Django would call it for a
scrape; each run is the median of several scrapes. PostgreSQL only: SQLite counts exactly.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from types import ModuleType
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import RequestFactory
from django.utils import timezone

from prescient.api import tokens
from prescient.api.metrics import metrics
from prescient.engine import bulk
from prescient.models import ApiToken, JobHistory
from prescient.states import Outcome

#: Outcomes of the history rows, in turn (completed the most often).
OUTCOMES = [Outcome.COMPLETED] * 6 + [Outcome.FAILED, Outcome.CANCELLED, Outcome.MAX_CHECKS, Outcome.KILLED]
HISTORY_SPAN = timedelta(days=7)


def add_history(S: ModuleType, count: int, now: Any) -> None:
    """``count`` history rows finished one after the other over the last :data:`HISTORY_SPAN`,
    in one statement (every column written: ours, or the field's default)."""
    step = HISTORY_SPAN.total_seconds() / count
    ours = {"entity_name": "bench.item", "job_exec": S.NOOP, "first_check_at": now, "created_at": now}
    columns, values, params = [], [], []
    for field in bulk.insert_fields(JobHistory):
        columns.append(connection.ops.quote_name(field.column))
        if field.attname in ("job_id", "entity_key"):
            values.append("x" if field.attname == "job_id" else "CAST(x AS TEXT)")
        elif field.attname == "outcome":
            values.append(f"(%s::text[])[1 + x %% {len(OUTCOMES)}]")
            params.append([str(o) for o in OUTCOMES])
        elif field.attname == "finished_at":
            values.append("%s - (x * %s) * interval '1 second'")
            params += [now, step]
        else:
            value = ours[field.attname] if field.attname in ours else field.get_default()
            values.append("%s")
            params.append(field.get_db_prep_save(value, connection))
    cte, cte_params = S.series(1, count)
    S.q(f"{cte}INSERT INTO {JobHistory._meta.db_table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM g",
        [*cte_params, *params])


def scrape(factory: RequestFactory, secret: str) -> float:
    request = factory.get("/prescient/metrics", headers={"Authorization": f"Bearer {secret}"})
    started = time.perf_counter()
    response = metrics(request)
    seconds = time.perf_counter() - started
    if response.status_code != 200 or b"prescient_jobs{" not in response.content:
        raise RuntimeError(f"the scrape answered {response.status_code}: {response.content[:200]!r}")
    return seconds


def measure(res: Any, sizes: dict[str, Any], S: ModuleType) -> None:
    if not S.pg():
        return
    pending, finished, scrapes = sizes["metrics_pending"], sizes["metrics_history"], sizes["metrics_scrapes"]
    now = timezone.now()
    S.clear_jobs()
    S.log(f"metrics: loading {pending:,} pending jobs and {finished:,} history rows")
    S.add_jobs(1, 1_000, now - timedelta(minutes=15))
    S.add_jobs(S.BASE_KEY, pending - 1_000, now + timedelta(days=7))
    add_history(S, finished, now)
    S.vacuum("prescient_futurejob", "prescient_jobhistory")
    user = get_user_model().objects.create_superuser("bench-metrics", password=None)
    _token, secret = tokens.issue(user, "bench", all_checks=True, now=now)
    factory = RequestFactory()
    try:
        scrape(factory, secret)  # warm-up: the first scrape imports prometheus_client
        for run in range(sizes["runs"]):
            samples = [scrape(factory, secret) for _ in range(scrapes)]
            res.add("metrics.scrape", statistics.median(samples))
            S.log(f"metrics run {run + 1}/{sizes['runs']}: scrape median {statistics.median(samples) * 1e3:.1f} ms "
                  f"(min {min(samples) * 1e3:.1f}, max {max(samples) * 1e3:.1f}) of {scrapes}")
    finally:
        ApiToken.objects.filter(user=user).delete()
        user.delete()
        S.clear_jobs()
