"""API tokens: issue, check and revoke. Only the SHA-256 digest of a secret is stored."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Q, QuerySet

from ..models import ApiToken

logger = logging.getLogger(__name__)

#: Every secret starts with this, so that a leaked one is easy to recognise (and to scan for).
SECRET_PREFIX = "pst_"
#: Characters of the secret kept in clear (``ApiToken.prefix``) to tell tokens apart.
PREFIX_LENGTH = len(SECRET_PREFIX) + 8
#: Longer "secrets" are not looked up at all.
MAX_SECRET_LENGTH = 200
#: ``last_used_at`` is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest(secret: str) -> str:
    """The stored form of ``secret``: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    """A fresh secret: the prefix and 256 random bits."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def issue(
    user: AbstractBaseUser,
    name: str,
    *,
    checks: Iterable[str] = (),
    all_checks: bool = False,
    expires_at: datetime | None = None,
    now: datetime,
) -> tuple[ApiToken, str]:
    """Create a token for ``user`` and return it with its secret, which is not stored anywhere.

    The scope is explicit: give the check names, or ``all_checks=True``. ``expires_at``, if
    given, must be later than ``now``: from then on the token is refused.
    """
    if expires_at is not None and expires_at <= now:
        raise ValueError(f"A token must expire after it is created: {expires_at.isoformat()} is not after now")
    token = ApiToken(
        # Any AUTH_USER_MODEL will do: the plugin types the key as the test settings' user model.
        user=user, name=name, checks=sorted(set(checks)), all_checks=all_checks, expires_at=expires_at,  # type: ignore[misc]
    )
    secret = fill(token, now=now)
    token.save(force_insert=True)
    return token, secret


def fill(token: ApiToken, *, now: datetime) -> str:
    """Give an unsaved ``token`` a new secret (digest and prefix) and return the secret."""
    if not token.all_checks and not token.checks:
        raise ValueError("A token needs a scope: some check names, or all_checks=True")
    secret = new_secret()
    token.digest = digest(secret)
    token.prefix = secret[:PREFIX_LENGTH]
    token.created_at = now
    logger.info("api token prefix=%s issued to user=%s", token.prefix, token.user_id)
    return secret


class TokenExpired(Exception):
    """The secret is a token's, but the token has expired: the caller may be told so (they hold
    the secret), and told when, to know to ask for a new one."""

    def __init__(self, token: ApiToken) -> None:
        assert token.expires_at is not None
        self.token = token
        self.expires_at = token.expires_at
        super().__init__(f"api token prefix={token.prefix} expired at {token.expires_at.isoformat()}")


def authenticate(secret: str, *, now: datetime) -> ApiToken | None:
    """The live token whose secret is ``secret``, with its user; None if unknown or revoked.

    Raises :class:`TokenExpired` for a token past its ``expires_at`` (not revoked, user active).
    The lookup is by digest, so the time it takes says nothing about the secret.
    """
    if not secret or len(secret) > MAX_SECRET_LENGTH:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=digest(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    if token.is_expired(now):
        raise TokenExpired(token)
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def revoke(tokens: QuerySet[ApiToken], *, now: datetime) -> int:
    """Revoke the live tokens among ``tokens`` at once; returns how many were live."""
    count = tokens.filter(Q(revoked_at__isnull=True)).update(revoked_at=now)
    logger.info("api tokens revoked count=%s", count)
    return count
