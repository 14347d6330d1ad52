"""``GET /prescient/metrics``: the scheduler's figures in the Prometheus text format.

Needs the optional ``prometheus_client`` (``pip install prescient[metrics]``); without it the
endpoint answers 501 and ``manage.py check`` says so (``prescient.I001``). Callers authenticate
as for the JSON API (:mod:`.auth`): an API token scoped to every check, or a logged-in user,
either with the permission ``prescient.view_futurejob``.

Each scrape builds a fresh :class:`~prometheus_client.CollectorRegistry` holding one
:class:`PrescientCollector`, which reads the figures once (:func:`prescient.queries.figures`)
and the running totals once (:class:`prescient.tallies.MetricTally`, one grouped query): the
counters and histograms per check and queue come from the database, so they survive the
processes that counted. Nothing is kept between scrapes, and the process's default registry
is left alone.
"""

from __future__ import annotations

import importlib.util
import logging
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import InterfaceError, OperationalError
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .. import limits, queries
from ..clock import db_now
from ..status import expectations
from ..tallies import DURATION_BUCKETS, LAG_BUCKETS, MetricTally
from .auth import VIEW, BearerToken, Principal, SessionCookie
from .errors import ApiError, forbidden, unauthenticated

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

logger = logging.getLogger(__name__)

#: The label ``window`` of ``prescient_finished_jobs``.
WINDOW = "1h"


def available() -> bool:
    """Whether ``prometheus_client`` can be imported (the ``metrics`` extra)."""
    return importlib.util.find_spec("prometheus_client") is not None


class PrescientCollector:
    """The figures of one scrape as Prometheus metric families, read as of ``now``."""

    def __init__(self, now: datetime, *, exact_up_to: int = queries.EXACT_COUNT_LIMIT) -> None:
        self.now = now
        self.exact_up_to = exact_up_to

    def describe(self) -> list[Metric]:
        return []  # nothing to check at registration; collect() reads the database once per scrape

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        figures = queries.figures(self.now, exact_up_to=self.exact_up_to)
        jobs = GaugeMetricFamily(
            "prescient_jobs",
            "Live jobs per state (above " + f"{self.exact_up_to:,}" + " in a state, PostgreSQL's estimate).",
            labels=["state"],
        )
        for state, n in figures.jobs.items():
            jobs.add_metric([state], n)
        yield jobs
        yield GaugeMetricFamily("prescient_due_jobs", "Scheduled jobs whose time has come.", value=figures.due)
        yield GaugeMetricFamily(
            "prescient_oldest_overdue_seconds",
            "How late the oldest due job is, in seconds (0 when none is due).",
            value=figures.oldest_overdue_seconds,
        )
        yield GaugeMetricFamily(
            "prescient_workers_alive", "Workers heart-beating within the stale period.", value=len(figures.workers)
        )
        finished = GaugeMetricFamily(
            "prescient_finished_jobs", "Jobs that ended in the last hour, per outcome.", labels=["outcome", "window"]
        )
        for outcome, n in figures.finished.items():
            finished.add_metric([outcome, WINDOW], n)
        yield finished
        skew = GaugeMetricFamily(
            "prescient_worker_clock_skew_seconds",
            "A live worker's clock minus the database's, at its last heartbeat.",
            labels=["worker"],
        )
        for worker in figures.workers:
            skew.add_metric([worker.name], worker.clock_skew_seconds)
        yield skew
        declared = expectations(self.now)
        if declared:
            ended = GaugeMetricFamily(
                "prescient_expectations_ended",
                "Expectations ended met or missed in the past 24 hours, per expectation.",
                labels=["expectation", "outcome", "window"],
            )
            pending = GaugeMetricFamily(
                "prescient_expectations_pending", "Pending jobs per expectation.", labels=["expectation"]
            )
            for info in declared:
                ended.add_metric([info.name, "met", "24h"], info.met)
                ended.add_metric([info.name, "missed", "24h"], info.missed)
                pending.add_metric([info.name], info.pending)
            yield ended
            yield pending
        held = limits.held_counts(self.now)
        if limits.declared():
            family = GaugeMetricFamily(
                "prescient_jobs_held", "Due jobs held back by a limit or rate per key, per limit or rate.",
                labels=["limit"],
            )
            for name, n in held.items():
                family.add_metric([name], n)
            yield family
        yield from tally_families()


#: Counters drawn from the tallies: ``(figure prefix, metric, help, name of the label after the colon)``.
COUNTERS = [
    ("runs", "prescient_runs", "Runs of a job's code, per check, queue and what the run led to.", "result"),
    ("outcomes", "prescient_job_outcomes", "Jobs that ended, per check, queue and outcome.", "outcome"),
    ("rescues", "prescient_rescues", "Stale claims the rescuer dealt with, per check, queue and action.", "action"),
]
#: Histograms drawn from the tallies: ``(figure prefix, metric, help, bucket bounds)``.
HISTOGRAMS = [
    ("duration", "prescient_run_duration_seconds", "How long a job's code ran, per run.", DURATION_BUCKETS),
    ("lag", "prescient_start_lag_seconds", "From a job's due time to the start of its run.", LAG_BUCKETS),
]


def read_tallies() -> dict[tuple[str, str], dict[str, float]]:
    """``{(check, queue): {figure: total}}``: every running total, its shards summed, in one query."""
    totals: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    rows = MetricTally.objects.values_list("job_exec", "queue", "name").annotate(total=Sum("value")).order_by()
    for check, queue, name, total in rows:
        totals[check, queue][name] = float(total)
    return totals


def tally_families() -> Iterator[Metric]:
    """The counters and histograms per check and queue, from :func:`read_tallies`."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    totals = read_tallies()
    for prefix, metric, help_text, label in COUNTERS:
        family = CounterMetricFamily(metric, help_text, labels=["check", "queue", label])
        for (check, queue), figures in sorted(totals.items()):
            for name, total in sorted(figures.items()):
                what, colon, value = name.partition(":")
                if colon and what == prefix:
                    family.add_metric([check, queue, value], total)
        yield family
    retries = CounterMetricFamily(
        "prescient_retries", "Failed runs whose job is due again to retry, per check and queue.",
        labels=["check", "queue"],
    )
    for (check, queue), figures in sorted(totals.items()):
        if "retries" in figures:
            retries.add_metric([check, queue], figures["retries"])
    yield retries
    for prefix, metric, help_text, bounds in HISTOGRAMS:
        histogram = HistogramMetricFamily(metric, help_text, labels=["check", "queue"])
        for (check, queue), figures in sorted(totals.items()):
            if f"{prefix}_sum" not in figures:
                continue
            buckets, seen = [], 0.0
            for bound in bounds:
                seen += figures.get(f"{prefix}_le:{bound:g}", 0.0)
                buckets.append((f"{bound:g}", seen))
            count = sum(v for name, v in figures.items() if name.startswith(f"{prefix}_le:"))
            buckets.append(("+Inf", count))
            histogram.add_metric([check, queue], buckets, figures[f"{prefix}_sum"])
        yield histogram


def exposition(now: datetime, *, exact_up_to: int = queries.EXACT_COUNT_LIMIT) -> tuple[bytes, str]:
    """``(body, content type)`` of one scrape as of ``now``, from a registry of its own."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PrescientCollector(now, exact_up_to=exact_up_to))
    return generate_latest(registry), CONTENT_TYPE_LATEST


def _error(error: ApiError) -> JsonResponse:
    response = JsonResponse(error.payload(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def authenticate(request: HttpRequest) -> Principal:
    """The caller, as the JSON API finds it (a bearer token first, then the session), with the
    view permission and, for a token, a scope of every check (the figures cover them all)."""
    principal: Principal | None = None
    for auth in (BearerToken(VIEW), SessionCookie(VIEW)):
        principal = auth(request)
        if principal is not None:
            break
    if principal is None:
        raise unauthenticated("Authentication required: send 'Authorization: Bearer <token>' or log in.")
    if not principal.all_checks:
        raise forbidden("The metrics count the jobs of every check: use a token scoped to all checks.")
    return principal


@csrf_exempt  # GET only; a POST gets a JSON 405, not Django's CSRF page
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of :class:`PrescientCollector`, for an authorised caller."""
    if request.method not in ("GET", "HEAD"):
        response = _error(ApiError(405, f"Method {request.method} not allowed here; use GET."))
        response["Allow"] = "GET, HEAD"
        return response
    try:
        authenticate(request)
        if not available():
            raise ApiError(501, "Metrics need prometheus_client: pip install 'prescient[metrics]'.")
        body, content_type = exposition(db_now())
    except ApiError as error:
        return _error(error)
    except (OperationalError, InterfaceError) as exc:  # unreachable; anything else is a bug: a 500
        logger.warning("metrics: database error: %s", exc)
        return _error(ApiError(503, "The database cannot be reached; try again later.", headers={"Retry-After": "5"}))
    return HttpResponse(body, content_type=content_type)
