"""prescient's URLs. Mount them in the host project::

    path("prescient/", include("prescient.urls")),

This serves the JSON API (``jobs``, deprecated ``tasks``, ``workflows/<name>/...``, ``schedules``,
``history``, ``health``), its OpenAPI document (``openapi.json``), an interactive page for it
(``docs``) and the Prometheus metrics (``metrics``, see docs/metrics.md). Any other path
below the mount point is a JSON 404, and a wrong method a JSON 405.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, path, re_path
from django.views.decorators.csrf import csrf_exempt

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


def _with_json_405(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    return [
        URLPattern(p.pattern, _json_405(p.callback), p.default_args, p.name) if isinstance(p, URLPattern) else p
        for p in patterns
    ]


@csrf_exempt  # it changes nothing; without this a POST would get Django's HTML CSRF page
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return _error(ApiError(404, "No such endpoint; see openapi.json."))


_api_patterns, _app_name, _namespace = api.urls

urlpatterns = [
    path("metrics", metrics, name="prescient-metrics"),
    path("", (_with_json_405(_api_patterns), _app_name, _namespace)),
    re_path(r"^(?P<rest>.*)$", not_found, name="prescient-not-found"),
]
