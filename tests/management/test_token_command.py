"""prescient_token create / list / revoke (issue #35, item 6): API tokens issued without the
shell. ``create`` prints the secret once, ``list`` never, ``revoke`` by id or name."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from prescient.api import tokens
from prescient.models import ApiToken
from tests.conftest import T0

pytestmark = pytest.mark.django_db

T0_ISO = "2026-11-22T10:00:00+00:00"


def run(*args, verbosity=1):
    out, err = StringIO(), StringIO()
    call_command("prescient_token", *args, "--now", T0_ISO, stdout=out, stderr=err, verbosity=verbosity)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def admin():
    return get_user_model().objects.create_user(username="admin", password=None)


def test_create__prints_the_secret_alone_on_stdout_and_the_words_on_stderr(admin):
    out, err = run("create", "--name", "billing", "--user", "admin", "--check", "test.record", "--expires-in", "30d")
    secret = out.strip()
    assert out == secret + "\n" and secret.startswith("pst_")
    token = ApiToken.objects.get()
    assert err == (
        f"Created API token {token.pk} 'billing' for admin (test.record; expires 2026-12-22T10:00:00+00:00). "
        "The secret above is shown once: only its digest is kept.\n"
    )
    assert (token.name, token.user, token.checks, token.all_checks) == ("billing", admin, ["test.record"], False)
    assert (token.created_at, token.expires_at) == (T0, T0 + timedelta(days=30))
    assert secret not in str(ApiToken.objects.values_list().get())  # only the digest is stored
    assert tokens.authenticate(secret, now=T0) == token
    assert run("create", "--name", "ops", "--user", "admin", "--all-checks", verbosity=0)[1] == ""


def test_create_json__the_token_with_its_secret(admin):
    data = json.loads(run("create", "--name", "ops", "--user", "admin", "--all-checks", "--json")[0])
    token = ApiToken.objects.get()
    assert data.pop("secret").startswith(token.prefix)
    assert data == {
        "id": token.pk, "name": "ops", "user": "admin", "prefix": token.prefix, "all_checks": True, "checks": [],
        "created_at": T0_ISO, "last_used_at": None, "expires_at": None, "revoked_at": None, "status": "live",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "admin", "--all-checks"], "create needs --name"),
        (["--name", "x", "--all-checks"], "create needs --user"),
        (["--name", "x", "--user", "amdin", "--all-checks"], "No user 'amdin'. Did you mean 'admin'?"),
        (["--name", "x", "--user", "admin"], "give the checks the token may act on"),
        (["--name", "x", "--user", "admin", "--all-checks", "--check", "test.record"], "not both"),
        (["--name", "x", "--user", "admin", "--check", "test.recrod"], "Unknown check 'test.recrod'. Did you mean"),
        (["--name", "x", "--user", "admin", "--all-checks", "--expires-in", "30"], "'30' is not a duration"),
        (["--name", "x", "--user", "admin", "--all-checks", "--expires-in", "0d"], "'0d' is out of range"),
        (["--name", "x", "--user", "admin", "--all-checks", "--expires-in", "40000d"], "'40000d' is out of range"),
        (["--name", "x", "--user", "admin", "--all-checks", "--id", "3"], "--id does not go with create"),
    ],
)
def test_create__bad_input_is_a_command_error_and_makes_nothing(admin, args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        run("create", *args)
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(("text", "days"), [("90m", 90 / 1440), ("12h", 0.5), ("2w", 14), ("30D", 30)])
def test_create__expires_in_units(admin, text, days):
    run("create", "--name", "x", "--user", "admin", "--all-checks", "--expires-in", text)
    assert ApiToken.objects.get().expires_at == T0 + timedelta(days=days)


def test_list__every_token_with_its_status_and_never_a_secret(admin):
    other = get_user_model().objects.create_user(username="bob", password=None)
    live, live_secret = tokens.issue(admin, "live", checks=["test.record"], now=T0)
    old, old_secret = tokens.issue(admin, "old", all_checks=True, expires_at=T0 - timedelta(days=1, minutes=-1),
                                   now=T0 - timedelta(days=1))
    gone, gone_secret = tokens.issue(other, "gone", all_checks=True, now=T0 - timedelta(days=2))
    tokens.revoke(ApiToken.objects.filter(pk=gone.pk), now=T0)
    out, _ = run("list")
    for secret in (live_secret, old_secret, gone_secret):
        assert secret not in out
    assert out.splitlines() == [
        (f"{live.pk}  live  user=admin  {live.prefix}…  checks=test.record  created {T0_ISO}  last used -  "
        "expires -  live"),
        (f"{old.pk}  old  user=admin  {old.prefix}…  all checks  created 2026-11-21T10:00:00+00:00  last used -  "
        "expires 2026-11-21T10:01:00+00:00  expired"),
        (f"{gone.pk}  gone  user=bob  {gone.prefix}…  all checks  created 2026-11-20T10:00:00+00:00  last used -  "
        "expires -  revoked"),
        "3 token(s).",
    ]
    data = json.loads(run("list", "--user", "bob", "--json")[0])
    assert [(row["id"], row["status"]) for row in data["tokens"]] == [(gone.pk, "revoked")]
    assert "secret" not in data["tokens"][0] and "digest" not in data["tokens"][0]


def test_revoke__by_id_or_by_name(admin):
    first, secret = tokens.issue(admin, "billing", all_checks=True, now=T0)
    second, _ = tokens.issue(admin, "ops", all_checks=True, now=T0)
    assert run("revoke", "--id", str(first.pk))[0] == (
        f"Revoked API token {first.pk} 'billing' ({first.prefix}…): it is refused from now on.\n"
    )
    assert tokens.authenticate(secret, now=T0) is None
    assert run("revoke", "--id", str(first.pk))[0] == (
        f"API token {first.pk} 'billing' was already revoked at {T0_ISO}.\n"
    )
    data = json.loads(run("revoke", "--name", "ops", "--json")[0])
    assert (data["id"], data["changed"], data["status"]) == (second.pk, True, "revoked")


def test_revoke__a_name_of_several_live_tokens_needs_the_id(admin):
    a, _ = tokens.issue(admin, "svc", all_checks=True, now=T0)
    b, _ = tokens.issue(admin, "svc", all_checks=True, now=T0)
    with pytest.raises(CommandError, match=re.escape(f"2 live API tokens are named 'svc' (ids {b.pk}, {a.pk})")):
        run("revoke", "--name", "svc")
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "revoke needs the token: give --id or --name"),
        (["--id", "1", "--name", "svc-billing"], "revoke needs the token: give --id or --name"),
        (["--id", "999"], "No API token with id 999"),
        (["--name", "svc-billng"], "No API token named 'svc-billng'. Did you mean 'svc-billing'?"),
        (["--name", "svc-billing", "--expires-in", "1d"], "--expires-in does not go with revoke"),
    ],
)
def test_revoke__bad_input_is_a_command_error(admin, args, message):
    tokens.issue(admin, "svc-billing", all_checks=True, now=T0)
    with pytest.raises(CommandError, match=re.escape(message)):
        run("revoke", *args)
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()
