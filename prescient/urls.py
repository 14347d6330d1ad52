"""prescient's URLs. Mount them in the host project::

    path("prescient/", include("prescient.urls")),

This serves the JSON API (``jobs``, deprecated ``tasks``, ``workflows/<name>/...``, ``schedules``,
``history``, ``health``), its OpenAPI document (``openapi.json``), an interactive page for it
(``docs``) and the Prometheus metrics (``metrics``, see docs/metrics.md). Any other path
below the mount point is a JSON 404, and a wrong method a JSON 405.

The API's GETs are read on ``PRESCIENT["READ_DATABASE"]`` (:mod:`prescient.reads`), except
``health``, which says whether the primary answers; an answer read on a replica that lags
carries the header ``Prescient-As-Of`` (the replica's last replay, ISO 8601).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, path, re_path
from django.views.decorators.csrf import csrf_exempt

from . import reads
from .api.errors import ApiError
from .api.metrics import metrics
from .api.views import api


def _error(error: ApiError) -> JsonResponse:
    response = JsonResponse(error.payload(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def _json_405(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """ninja answers a wrong method with a bare 405: give it the error shape."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and not response.get("Content-Type", "").startswith("application/json"):
            allowed = response.get("Allow", "")
            json_response = _error(ApiError(405, f"Method {request.method} not allowed here; use {allowed}."))
            json_response["Allow"] = allowed
            return json_response
        return response

    return wrapped


#: The header of an answer read on a replica that lags: the time it is as of.
AS_OF_HEADER = "Prescient-As-Of"
#: API views read on the primary whatever the method: ``health`` says whether the primary answers.
ON_PRIMARY = frozenset({"health"})


def _reads(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A GET or HEAD read off the primary (prescient.reads), saying "as of" when it lags."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with reads.reading(request) as alias:
            stamp = reads.as_of(alias)
            response = view(request, *args, **kwargs)
        if stamp is not None:
            response[AS_OF_HEADER] = stamp.isoformat()
        return response

    return wrapped


def _with_json_405(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    return [
        URLPattern(
            p.pattern, _json_405(p.callback if p.name in ON_PRIMARY else _reads(p.callback)), p.default_args, p.name
        ) if isinstance(p, URLPattern) else p
        for p in patterns
    ]


@csrf_exempt  # it changes nothing; without this a POST would get Django's HTML CSRF page
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return _error(ApiError(404, "No such endpoint; see openapi.json."))


_api_patterns, _app_name, _namespace = api.urls

urlpatterns = [
    path("metrics", _reads(metrics), name="prescient-metrics"),
    path("", (_with_json_405(_api_patterns), _app_name, _namespace)),
    re_path(r"^(?P<rest>.*)$", not_found, name="prescient-not-found"),
]
