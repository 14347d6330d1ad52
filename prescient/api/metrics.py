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
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import InterfaceError, OperationalError
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .. import counting, limits, queries
from ..checks import registered
from ..clock import db_now
from ..engine.decisions import DISCARDED, HANDED_BACK, RESCHEDULED, RESCUED, RETRIED, SLEPT
from ..states import Outcome
from ..status import expectations
from ..tallies import DURATION_BUCKETS, LAG_BUCKETS, MetricTally
from .auth import VIEW, BearerToken, Principal, SessionCookie
from .errors import ApiError, forbidden, unauthenticated

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

logger = logging.getLogger(__name__)

def available() -> bool:
    """Whether ``prometheus_client`` can be imported (the ``metrics`` extra)."""
    return importlib.util.find_spec("prometheus_client") is not None


class PrescientCollector:
    """The figures of one scrape as Prometheus metric families, read as of ``now``."""

    def __init__(self, now: datetime, *, exact_up_to: int = counting.EXACT_COUNT_LIMIT) -> None:
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
        skew = GaugeMetricFamily(
            "prescient_worker_clock_skew_seconds",
            "A live worker's clock minus the database's, at its last heartbeat, per host and worker name.",
            labels=["host", "worker"],
        )
        for (host, name), seconds in worker_skews(figures.workers).items():
            skew.add_metric([host, name], seconds)
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


def worker_skews(workers: Iterable[queries.WorkerFigure]) -> dict[tuple[str, str], float]:
    """``{(host, given name): skew}``: labels that stay the same across restarts (a pid would make
    a new series at each). Live workers sharing both (two started on one host without
    ``--name``) share one clock too: the skew of largest size among them stands for them."""
    skews: dict[tuple[str, str], float] = {}
    for worker in workers:
        key = (worker.host, worker.given_name)
        if key not in skews or abs(worker.clock_skew_seconds) > abs(skews[key]):
            skews[key] = worker.clock_skew_seconds
    return dict(sorted(skews.items()))


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


#: The values of each counter's last label, known in advance: every counter is exported at 0 for
#: each of them, per check and queue, before its first event (so that ``rate()`` and
#: ``increase()`` see the first one). A run leads to an outcome or to one of the others.
LABEL_VALUES = {
    "runs": [*Outcome.values, RESCHEDULED, RETRIED, SLEPT, HANDED_BACK, DISCARDED],
    "outcomes": list(Outcome.values),
    "rescues": [*RESCUED, Outcome.FAILED.value],
}


def read_tallies() -> dict[tuple[str, str], dict[str, float]]:
    """``{(check, queue): {figure: total}}``: every running total, its shards summed, in one query;
    each registered check (with its queue) is there from the start, with no totals yet."""
    totals: dict[tuple[str, str], dict[str, float]] = {(entry.name, entry.queue): {} for entry in registered()}
    rows = MetricTally.objects.values_list("job_exec", "queue", "name").annotate(total=Sum("value")).order_by()
    for check, queue, name, total in rows:
        totals.setdefault((check, queue), {})[name] = float(total)
    return totals


def tally_families() -> Iterator[Metric]:
    """The counters and histograms per check and queue, from :func:`read_tallies`."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    totals = read_tallies()
    for prefix, metric, help_text, label in COUNTERS:
        family = CounterMetricFamily(metric, help_text, labels=["check", "queue", label])
        for (check, queue), figures in sorted(totals.items()):
            counted = {name.partition(":")[2]: total for name, total in figures.items()
                       if name.partition(":")[0] == prefix}
            for value in sorted(dict.fromkeys(LABEL_VALUES[prefix], 0.0) | counted):
                family.add_metric([check, queue, value], counted.get(value, 0.0))
        yield family
    retries = CounterMetricFamily(
        "prescient_retries", "Failed runs whose job is due again to retry, per check and queue.",
        labels=["check", "queue"],
    )
    for (check, queue), figures in sorted(totals.items()):
        retries.add_metric([check, queue], figures.get("retries", 0.0))
    yield retries
    for prefix, metric, help_text, bounds in HISTOGRAMS:
        histogram = HistogramMetricFamily(metric, help_text, labels=["check", "queue"])
        for (check, queue), figures in sorted(totals.items()):
            buckets, seen = [], 0.0
            for bound in bounds:
                seen += figures.get(f"{prefix}_le:{bound:g}", 0.0)
                buckets.append((f"{bound:g}", seen))
            count = sum(v for name, v in figures.items() if name.startswith(f"{prefix}_le:"))
            buckets.append(("+Inf", count))
            histogram.add_metric([check, queue], buckets, figures.get(f"{prefix}_sum", 0.0))
        yield histogram


def exposition(now: datetime, *, exact_up_to: int = counting.EXACT_COUNT_LIMIT) -> tuple[bytes, str]:
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
