"""Who is calling, and what they may do.

Two ways in, tried in this order:

- ``Authorization: Bearer <secret>``: an API token made in the admin. A header that is present
  but wrong is a 401; it never falls back to the session. So is an expired token's, whose
  401 says it expired, and when.
- The Django session cookie (a person logged in to the admin). Requests that change
  something need the CSRF token too (``X-CSRFToken`` header), as every Django form does.

Each endpoint then needs one Django permission of the user (the token's owner): a 403 otherwise.
A token also has a scope, the checks it may act on: see :class:`Principal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from ..models import ApiToken
from . import tokens
from .errors import expired, forbidden, unauthenticated

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

VIEW = "prescient.view_futurejob"
ADD = "prescient.add_futurejob"
CHANGE = "prescient.change_futurejob"
VIEW_HISTORY = "prescient.view_jobhistory"
VIEW_SCHEDULE = "prescient.view_schedule"
ADD_SCHEDULE = "prescient.add_schedule"
CHANGE_SCHEDULE = "prescient.change_schedule"
DELETE_SCHEDULE = "prescient.delete_schedule"


@dataclass(frozen=True)
class Principal:
    """The caller: a user, and the token used (None for a session, which has no scope)."""

    user: Any
    token: ApiToken | None = None

    @property
    def all_checks(self) -> bool:
        return self.token is None or self.token.all_checks

    def allows(self, check_name: str) -> bool:
        """Whether the caller may see and act on jobs of ``check_name``."""
        return self.token is None or self.token.allows(check_name)

    def scope(self) -> list[str] | None:
        """The check names allowed, or None for every check."""
        if self.all_checks:
            return None
        assert self.token is not None
        return [name for name in self.token.checks if isinstance(name, str)]

    def require(self, permission: str) -> Principal:
        if not self.user.has_perm(permission):
            raise forbidden(f"This needs the permission {permission}.")
        return self


def caller(request: HttpRequest) -> Principal:
    """The authenticated caller of ``request`` (set by the auth classes below)."""
    principal = getattr(request, "auth", None)
    assert isinstance(principal, Principal)
    return principal


class BearerToken(HttpBearer):
    """``Authorization: Bearer <secret>`` with an API token; needs ``permission`` of its user."""

    openapi_description = "An API token created in the admin (shown once, when it is created)."

    def __init__(self, permission: str) -> None:
        self.permission = permission
        super().__init__()

    def __call__(self, request: HttpRequest) -> Principal | None:
        header = request.headers.get(self.header)
        if header is None:
            return None
        scheme, _, secret = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise unauthenticated("Use the header 'Authorization: Bearer <token>'.")
        return self.authenticate(request, secret.strip())

    def authenticate(self, request: HttpRequest, token: str) -> Principal:
        try:
            found = tokens.authenticate(token, now=timezone.now())
        except tokens.TokenExpired as exc:
            raise expired(exc.expires_at) from exc
        if found is None:
            raise unauthenticated("The token is not valid: unknown, revoked, or its user is inactive.")
        return Principal(user=found.user, token=found).require(self.permission)


class SessionCookie(APIKeyCookie):
    """A logged-in Django session; unsafe methods need the CSRF token. Needs ``permission``."""

    openapi_description = "The Django session of a logged-in user; send X-CSRFToken with POST requests."

    def __init__(self, permission: str) -> None:
        self.permission = permission
        self.param_name = settings.SESSION_COOKIE_NAME
        super().__init__(csrf=True)

    def __call__(self, request: HttpRequest) -> Principal | None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in SAFE_METHODS and check_csrf(request) is not None:
            raise forbidden("CSRF check failed: send the X-CSRFToken header with the csrftoken cookie's value.")
        return Principal(user=user).require(self.permission)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:  # pragma: no cover
        raise NotImplementedError  # __call__ does the work


def needs(permission: str) -> list[Any]:
    """The ``auth=`` of an endpoint that needs ``permission``."""
    return [BearerToken(permission), SessionCookie(permission)]
