"""``GET expectations``: the declared expectations, each with its pending jobs and how many were
met and missed in the past 24 hours (the SLA in figures), as ``prescient_status`` shows them."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from ..status import expectations
from .auth import VIEW, caller, needs
from .schemas import ExpectationOut
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
