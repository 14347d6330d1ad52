"""One error shape for every 4xx (and 503) answer of the API.

503 (with ``Retry-After``) means the database cannot be reached (an OperationalError or
InterfaceError): retrying later helps. A value the database refuses (DataError) is a 400; a
conflict (IntegrityError) a 409.

    {"status": 400, "code": "invalid", "message": "The request is not valid.",
     "fields": {"at": ["Give a UTC offset, e.g. 2026-11-22T10:00:00+00:00."]}}

``fields`` maps a field (``entity.key``, ``at``, ``limit``, or ``body`` for the body as a
whole) to its messages; it is empty when the error is not about one field.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError, DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, ValidationError

from ..exceptions import ImmutableField, InvalidEntity, InvalidTime, InvalidTransition, PrescientError, UnknownCheck

if TYPE_CHECKING:
    from ninja import NinjaAPI

logger = logging.getLogger(__name__)

#: An exception handler of :func:`install`: the error to answer with.
_Handler = TypeVar("_Handler", bound=Callable[..., "ApiError"])

CODES = {
    400: "invalid",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    501: "not_implemented",
    503: "unavailable",
}

#: Where ninja says a parameter came from; dropped from field names.
_SOURCES = {"body", "query", "path", "header", "cookie", "form", "file"}


class ApiError(Exception):
    """An answer other than success, in the API's one error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        fields: Mapping[str, Iterable[str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.fields = {name: list(messages) for name, messages in (fields or {}).items()}
        self.headers = dict(headers or {})
        super().__init__(status, message)

    def payload(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "code": CODES.get(self.status, "error"),
            "message": self.message,
            "fields": self.fields,
        }


def invalid(field: str, message: str) -> ApiError:
    """A 400 about one field."""
    return ApiError(400, "The request is not valid.", {field: [message]})


def not_found(message: str = "Not found.") -> ApiError:
    return ApiError(404, message)


def unauthenticated(message: str) -> ApiError:
    return ApiError(401, message, headers={"WWW-Authenticate": 'Bearer realm="prescient"'})


def expired(expires_at: datetime) -> ApiError:
    """A 401 for a token past its expiry: the caller holds the secret, so it may know why (RFC 6750's
    ``invalid_token``, which tells a client to get a new token rather than to retry)."""
    return ApiError(
        401,
        f"The token expired at {expires_at.isoformat()}; ask for a new one.",
        headers={
            "WWW-Authenticate": 'Bearer realm="prescient", error="invalid_token", error_description="The token expired"'
        },
    )


def forbidden(message: str, field: str | None = None) -> ApiError:
    return ApiError(403, message, {field: [message]} if field else None)


class BodyError(ValueError):
    """The request body cannot be read as one JSON value (raised by the API's parser)."""


#: The name every view gives its body parameter (not a field of the payload).
BODY_PARAM = "payload"


def field_name(loc: Iterable[Any]) -> str:
    """``("body", "payload", "entity", "key")`` -> ``"entity.key"``; ``("body", "payload")`` -> ``"body"``."""
    parts = [str(part) for part in loc]
    if parts and parts[0] in _SOURCES:
        source = parts.pop(0)
        if source == "body" and parts and parts[0] == BODY_PARAM:
            parts.pop(0)
        if not parts:
            return source
    return ".".join(parts)


def _message(error: Mapping[str, Any]) -> str:
    if error.get("type") == "missing":
        return "This field is required."
    if error.get("type") == "extra_forbidden":
        return "Unknown field."
    message = str(error.get("msg", "Not valid."))
    return message.removeprefix("Value error, ")


def render(api: NinjaAPI, request: HttpRequest, error: ApiError) -> HttpResponse:
    response = api.create_response(request, error.payload(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def install(api: NinjaAPI) -> None:
    """Answer every expected failure with the error shape (unexpected ones still reach Django)."""

    def handle(exc_class: type[Exception]) -> Callable[[_Handler], _Handler]:
        def decorator(func: _Handler) -> _Handler:
            api.add_exception_handler(exc_class, lambda request, exc: render(api, request, func(request, exc)))
            return func

        return decorator

    @handle(ApiError)
    def _api_error(request: HttpRequest, exc: ApiError) -> ApiError:
        return exc

    @handle(ValidationError)
    def _validation(request: HttpRequest, exc: ValidationError) -> ApiError:
        fields: dict[str, list[str]] = {}
        for error in exc.errors:
            fields.setdefault(field_name(error.get("loc", ())), []).append(_message(error))
        return ApiError(400, "The request is not valid.", fields)

    @handle(HttpError)
    def _http_error(request: HttpRequest, exc: HttpError) -> ApiError:
        if isinstance(exc, AuthenticationError):
            return unauthenticated(
                "Authentication required: send 'Authorization: Bearer <token>' or log in."
            )
        if isinstance(exc, AuthorizationError):
            return forbidden(exc.message)
        if exc.status_code == 400:  # ninja could not parse the body
            cause = exc.__cause__
            message = str(cause) if isinstance(cause, BodyError) else "The body is not valid JSON."
            return ApiError(400, "The request body cannot be read.", {"body": [message]})
        return ApiError(exc.status_code, exc.message)

    @handle(RequestDataTooBig)
    def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> ApiError:
        return ApiError(400, "The request body cannot be read.", {"body": ["The body is too large."]})

    @handle(Http404)
    def _not_found(request: HttpRequest, exc: Http404) -> ApiError:
        return not_found()

    @handle(PermissionDenied)
    def _denied(request: HttpRequest, exc: PermissionDenied) -> ApiError:
        return forbidden(str(exc) or "Permission denied.")

    @handle(PrescientError)
    def _prescient(request: HttpRequest, exc: PrescientError) -> ApiError:
        if isinstance(exc, InvalidTransition):
            return ApiError(409, str(exc))
        if isinstance(exc, ImmutableField):  # the pending job's workflow, say: a conflict with it
            return ApiError(409, str(exc), {exc.field: [str(exc)]})
        if isinstance(exc, LookupError):  # verbs.JobNotFound
            return not_found(str(exc))
        if isinstance(exc, UnknownCheck):
            return invalid("check", str(exc))
        if isinstance(exc, InvalidEntity):
            return invalid("entity", str(exc))
        if isinstance(exc, InvalidTime):
            return invalid("at", str(exc))
        return ApiError(400, str(exc))

    @handle(IntegrityError)
    def _integrity(request: HttpRequest, exc: IntegrityError) -> ApiError:
        logger.warning("api: integrity error path=%s: %s", request.path, exc)
        return ApiError(409, "The change conflicts with another one; try again.")

    @handle(DataError)
    def _data(request: HttpRequest, exc: DataError) -> ApiError:
        # A value the database refused (out of range, too long): the request's fault, and
        # retrying it will not help. The fields that can be are validated before this.
        logger.warning("api: data error path=%s: %s", request.path, exc)
        message = "A value is out of the range the database stores."
        return ApiError(400, "The request is not valid.", {"body": [message]})

    @handle(OperationalError)
    def _unreachable(request: HttpRequest, exc: DatabaseError) -> ApiError:
        logger.warning("api: database error path=%s: %s", request.path, exc)
        return ApiError(503, "The database cannot be reached; try again later.", headers={"Retry-After": "5"})

    @handle(InterfaceError)
    def _dropped(request: HttpRequest, exc: DatabaseError) -> ApiError:
        return _unreachable(request, exc)  # psycopg's "connection already closed"
