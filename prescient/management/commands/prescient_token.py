"""``prescient_token``: create, list and revoke the JSON API's tokens (as the admin does)."""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management.base import CommandError, CommandParser
from django.db.models import QuerySet
from django.utils import timezone

from prescient.api import tokens
from prescient.checks import registered
from prescient.conf import MAX_DELAY_SECONDS
from prescient.exceptions import UnknownCheck, closest, did_you_mean
from prescient.models import ApiToken

from ._args import aware_datetime, job_id
from ._select import ExamplesCommand

UNITS = {"m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
UNIT_WORDS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def duration(text: str) -> timedelta:
    """argparse type: a whole number and a unit, ``90m``, ``12h``, ``30d`` or ``2w``, up to 100 years."""
    found = re.fullmatch(r"\s*(\d{1,12})\s*([mhdw])\s*", text.lower())
    if not found:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give a whole number and a unit, m, h, d or w (e.g. 30d)"
        )
    seconds = int(found.group(1)) * UNITS[found.group(2)]
    if not 60 <= seconds <= MAX_DELAY_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: give from 1m to 36500d (100 years)")
    return timedelta(seconds=seconds)


#: The options each action takes (besides --json and --now).
TAKES = {
    "create": {"name", "user", "checks", "all_checks", "expires_in"},
    "list": {"user"},
    "revoke": {"id", "name", "user"},
}


def status(token: ApiToken, now: datetime) -> str:
    if token.is_revoked:
        return "revoked"
    return "expired" if token.is_expired(now) else "live"


def scope(token: ApiToken) -> str:
    return "all checks" if token.all_checks else ",".join(token.checks if isinstance(token.checks, list) else [])


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


class Command(ExamplesCommand):
    help = (
        "Create, list or revoke the JSON API's tokens. create prints the secret once (alone on stdout; "
        "only its digest is kept); list never shows a secret; revoke takes a token by --id or --name."
    )
    examples = (
        "prescient_token create --name billing --user admin --check shop.unshipped --expires-in 30d",
        "prescient_token create --name ops --user admin --all-checks --json",
        "prescient_token list --user admin",
        "prescient_token revoke --name billing",
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=sorted(TAKES), help="create, list or revoke.")
        parser.add_argument("--name", help="create: what the token is for; revoke: the live token of this name.")
        parser.add_argument(
            "--user", metavar="USERNAME",
            help="create: the user it acts for, with their permissions; list, revoke: that user's tokens.",
        )
        parser.add_argument(
            "--check", action="append", dest="checks", metavar="NAME",
            help="create: a check the token may act on (repeat for more).",
        )
        parser.add_argument(
            "--all-checks", action="store_true", help="create: every check, including checks registered later."
        )
        parser.add_argument(
            "--expires-in", type=duration, metavar="DURATION",
            help="create: refused from this long after now: 90m, 12h, 30d, 2w (default: never expires).",
        )
        parser.add_argument("--id", type=job_id, metavar="ID", help="revoke: the token of this id.")
        parser.add_argument(
            "--json", action="store_true",
            help="Print one JSON object: the token made (with its secret), the tokens, or what was revoked.",
        )
        parser.add_argument("--now", type=aware_datetime, default=None, help="As of this time (ISO 8601 with offset).")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        for key in {"name", "user", "checks", "all_checks", "expires_in", "id"} - TAKES[action]:
            if options[key]:
                raise CommandError(f"--{key.replace('_', '-')} does not go with {action}")
        now = options["now"] or timezone.now()
        getattr(self, f"do_{action}")(options, now)

    # --- create --------------------------------------------------------------------------------

    def do_create(self, options: dict[str, Any], now: datetime) -> None:
        name = (options["name"] or "").strip()
        if not name:
            raise CommandError("create needs --name: what the token is for, e.g. the calling service")
        if len(name) > ApiToken._meta.get_field("name").max_length:  # type: ignore[operator]
            raise CommandError(f"--name is longer than {ApiToken._meta.get_field('name').max_length} characters")
        if not options["user"]:
            raise CommandError("create needs --user: the token acts for this user, with their permissions")
        user = self.user(options["user"])
        checks = sorted(set(options["checks"] or []))
        if options["all_checks"] == bool(checks):
            raise CommandError("give the checks the token may act on (--check NAME, repeatable) or --all-checks, "
                               "not both")
        known = {entry.name for entry in registered()}
        for check in checks:
            if check not in known:
                raise CommandError(str(UnknownCheck(check, known)))
        expires_at = None if options["expires_in"] is None else now + options["expires_in"]
        token, secret = tokens.issue(
            user, name, checks=checks, all_checks=options["all_checks"], expires_at=expires_at, now=now
        )
        if options["json"]:
            self.emit({**self.row(token, now), "secret": secret})
            return
        # The secret alone on stdout (TOKEN=$(… prescient_token create …)); the words on stderr.
        self.stdout.write(secret)
        if self.verbosity >= 1:
            expiry = f"expires {token.expires_at.isoformat()}" if token.expires_at else "does not expire"
            self.stderr.write(
                f"Created API token {token.pk} {token.name!r} for {options['user']} ({scope(token)}; {expiry}). "
                "The secret above is shown once: only its digest is kept.",
                style_func=lambda text: text,
            )

    def user(self, username: str) -> AbstractBaseUser:
        model = get_user_model()
        try:
            return model._default_manager.get_by_natural_key(username)
        except model.DoesNotExist:
            known = model._default_manager.values_list(model.USERNAME_FIELD, flat=True)[:10_000]
            raise CommandError(f"No user {username!r}.{did_you_mean(closest(username, known))}") from None

    # --- list ----------------------------------------------------------------------------------

    def row(self, token: ApiToken, now: datetime) -> dict[str, Any]:
        """A token as the command shows it: never its secret, nor its digest."""
        return {
            "id": token.pk, "name": token.name, "user": token.user.get_username(), "prefix": token.prefix,
            "all_checks": token.all_checks, "checks": token.checks, "created_at": iso(token.created_at),
            "last_used_at": iso(token.last_used_at), "expires_at": iso(token.expires_at),
            "revoked_at": iso(token.revoked_at), "status": status(token, now),
        }

    def tokens(self, options: dict[str, Any]) -> QuerySet[ApiToken]:
        queryset = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
        if options["user"]:
            queryset = queryset.filter(user__pk=self.user(options["user"]).pk)
        return queryset

    def do_list(self, options: dict[str, Any], now: datetime) -> None:
        rows = [self.row(token, now) for token in self.tokens(options)]
        if options["json"]:
            self.emit({"tokens": rows})
            return
        for row in rows:
            scope_text = "all checks" if row["all_checks"] else "checks=" + ",".join(row["checks"])
            self.stdout.write(
                f"{row['id']}  {row['name']}  user={row['user']}  {row['prefix']}…  {scope_text}  "
                f"created {row['created_at']}  last used {row['last_used_at'] or '-'}  "
                f"expires {row['expires_at'] or '-'}  {row['status']}"
            )
        self.stdout.write(f"{len(rows)} token(s).")

    # --- revoke --------------------------------------------------------------------------------

    def do_revoke(self, options: dict[str, Any], now: datetime) -> None:
        if (options["id"] is None) == (options["name"] is None):
            raise CommandError("revoke needs the token: give --id or --name")
        queryset = self.tokens(options)
        if options["id"] is not None:
            found = list(queryset.filter(pk=options["id"]))
            if not found:
                raise CommandError(f"No API token with id {options['id']}")
        else:
            named = queryset.filter(name=options["name"])
            found = list(named.filter(revoked_at__isnull=True)) or list(named[:1])
            if not found:
                known = queryset.values_list("name", flat=True)[:10_000]
                hint = did_you_mean(closest(options["name"], known))
                raise CommandError(f"No API token named {options['name']!r}.{hint}")
            if len(found) > 1:
                ids = ", ".join(str(token.pk) for token in found)
                raise CommandError(f"{len(found)} live API tokens are named {options['name']!r} (ids {ids}): "
                                   "give the one to revoke by --id")
        token = found[0]
        changed = tokens.revoke(ApiToken.objects.filter(pk=token.pk), now=now) == 1
        token.refresh_from_db()
        if options["json"]:
            self.emit({**self.row(token, now), "changed": changed})
        elif changed:
            self.say(f"Revoked API token {token.pk} {token.name!r} ({token.prefix}…): it is refused from now on.")
        else:
            assert token.revoked_at is not None
            self.say(f"API token {token.pk} {token.name!r} was already revoked at {token.revoked_at.isoformat()}.")
