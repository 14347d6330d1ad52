"""``GET expectations``: the declared expectations, each with its pending jobs and how many were
met and missed in the past 24 hours, as ``prescient_status`` shows them; ``GET
expectations/{name}/sla``: one expectation's SLA, day by day (:mod:`prescient.sla`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query
from ninja.params import functions as params

from ..exceptions import closest, did_you_mean
from ..expectations import registered
from ..sla import sla
from ..status import expectations
from .auth import VIEW, caller, needs
from .errors import not_found
from .schemas import ExpectationOut, ExpectationSlaOut, SlaFilters, Text
from .views import _errors, api


@api.get(
    "expectations",
    auth=needs(VIEW),
    response={200: list[ExpectationOut], **_errors(401, 403)},
    tags=["expectations"],
    operation_id="list_expectations",
    summary="Expectations: pending, met and missed",
)
def list_expectations(request: HttpRequest) -> Any:
    """Every expectation the caller may see (a token: those its checks allow), by name."""
    principal = caller(request)
    return [vars(info) for info in expectations(timezone.now()) if principal.allows(info.name)]


@api.get(
    "expectations/{name}/sla",
    auth=needs(VIEW),
    response={200: ExpectationSlaOut, **_errors(400, 401, 403, 404, 503)},
    tags=["expectations"],
    operation_id="expectation_sla",
    summary="One expectation's SLA, day by day",
)
def expectation_sla(
    request: HttpRequest, filters: Query[SlaFilters], name: Text = params.Path(..., max_length=200)
) -> Any:
    """Per day (newest first, in the site's time zone): met within each rung, missed, ended
    otherwise; and the time to met (p50, p95) over the days. An expectation the caller may not
    see is a 404, as an unknown one."""
    principal = caller(request)
    visible = [entry.name for entry in registered() if principal.allows(entry.name)]
    if name not in visible:
        raise not_found(f"No expectation named {name!r}.{did_you_mean(closest(name, visible))}")
    [report] = sla(timezone.now(), days=filters.days, names=[name])
    # Times in answers are in UTC, as everywhere in the API; the days keep the site's zone.
    since, until = (datetime.fromisoformat(value).astimezone(UTC) for value in (report.since, report.until))
    return {**report.as_dict(), "since": since, "until": until}
