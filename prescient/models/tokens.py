"""The API's tokens."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class ApiToken(models.Model):
    """A secret that lets another service call the JSON API on behalf of ``user``.

    Only a SHA-256 digest of the secret is stored: the secret itself is shown once, when the
    token is created. The token acts with its user's permissions, and only on the checks it
    is scoped to: the ``checks`` listed, or every check when ``all_checks`` is set. It stops
    working when revoked, when its user is deactivated, or at ``expires_at`` (if set).
    """

    name = models.CharField(_("name"), max_length=100, help_text=_("What the token is for, e.g. the calling service."))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="prescient_api_tokens",
        verbose_name=_("user"), help_text=_("The token acts on behalf of this user, with their permissions."),
    )
    prefix = models.CharField(
        _("prefix"), max_length=16, editable=False, help_text=_("The start of the secret, to recognise it.")
    )
    digest = models.CharField(_("digest"), max_length=64, unique=True, editable=False)
    all_checks = models.BooleanField(
        _("all checks"), default=False, help_text=_("Allow every check, including checks registered later.")
    )
    checks = models.JSONField(_("checks"), default=list, blank=True, help_text=_("Names of the checks allowed."))
    created_at = models.DateTimeField(_("created at"), editable=False)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(
        _("expires at"), null=True, blank=True,
        help_text=_("From this time on the token is refused. Empty: it does not expire."),
    )

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def is_expired(self, now: datetime) -> bool:
        """Whether the token has expired by ``now`` (a token without ``expires_at`` never does)."""
        return self.expires_at is not None and self.expires_at <= now

    def allows(self, check_name: str) -> bool:
        """Whether this token may act on jobs of the check ``check_name``."""
        return self.all_checks or (isinstance(self.checks, list) and check_name in self.checks)
