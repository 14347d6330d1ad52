"""API tokens that expire (#35 item 7): an optional ``expires_at``, shown in the admin; an
expired token is a 401 that says so, in the API's one error shape."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from prescient.api import tokens
from prescient.models import ApiToken
from tests.api.test_views import Api, admin_client, assert_error, make_token, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def user():
    return make_user()


def test_issue__a_token_may_expire_but_not_before_it_is_made(user):
    now = timezone.now()
    token, _secret = tokens.issue(user, "svc", all_checks=True, expires_at=now + timedelta(days=30), now=now)
    assert token.expires_at == now + timedelta(days=30)
    assert not token.is_expired(now) and token.is_expired(now + timedelta(days=30))
    with pytest.raises(ValueError, match="must expire after it is created"):
        tokens.issue(user, "svc", all_checks=True, expires_at=now, now=now)
    assert ApiToken.objects.count() == 1


def test_authenticate__an_expired_token_raises_token_expired_and_is_not_marked_used(user):
    now = timezone.now()
    token, secret = tokens.issue(user, "svc", all_checks=True, expires_at=now + timedelta(hours=1), now=now)
    assert tokens.authenticate(secret, now=now + timedelta(minutes=59)) == token
    with pytest.raises(tokens.TokenExpired) as caught:
        tokens.authenticate(secret, now=now + timedelta(hours=1))
    assert caught.value.expires_at == token.expires_at
    token.refresh_from_db()
    assert token.last_used_at == now + timedelta(minutes=59)


def test_auth__an_expired_token_is_a_401_naming_its_expiry(user):
    secret = make_token(user)
    api = Api(secret)
    assert api.get("tasks").status_code == 200
    expires_at = timezone.now() - timedelta(seconds=1)
    ApiToken.objects.update(expires_at=expires_at)
    response = api.get("tasks")
    payload = assert_error(response, 401, message=re.escape(f"expired at {expires_at.isoformat()}"))
    assert payload["code"] == "unauthenticated" and payload["fields"] == {}
    assert 'error="invalid_token"' in response["WWW-Authenticate"]
    # A revoked token says nothing more than it did, expired or not.
    ApiToken.objects.update(revoked_at=timezone.now())
    assert_error(api.get("tasks"), 401, message="revoked")


def test_auth__a_token_that_expires_later_works(user):
    secret = make_token(user)
    ApiToken.objects.update(expires_at=timezone.now() + timedelta(days=1))
    assert Api(secret).get("tasks").status_code == 200


def test_token_admin__sets_and_shows_the_expiry(user):
    client = admin_client(get_user_model().objects.create_superuser(username="boss", password=None))
    later = timezone.localtime() + timedelta(days=30)
    fields = {"name": "x", "user": user.pk, "all_checks": "on"}
    past = {"expires_at_0": "2001-01-01", "expires_at_1": "10:00:00"}
    response = client.post("/admin/prescient/apitoken/add/", {**fields, **past})
    assert "Give a time in the future" in response.content.decode()
    assert not ApiToken.objects.exists()
    future = {"expires_at_0": later.strftime("%Y-%m-%d"), "expires_at_1": later.strftime("%H:%M:%S")}
    assert client.post("/admin/prescient/apitoken/add/", {**fields, **future}).status_code == 302
    token = ApiToken.objects.get()
    assert token.expires_at == later.replace(microsecond=0)
    listing = client.get("/admin/prescient/apitoken/").content.decode()
    assert "expires at" in listing.lower() and ">active<" in listing
    assert 'name="expires_at_0"' in client.get(f"/admin/prescient/apitoken/{token.pk}/change/").content.decode()
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    assert ">expired<" in client.get("/admin/prescient/apitoken/").content.decode()


def test_metrics__an_expired_token_is_the_same_401(user):
    secret = make_token(user)
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = Client().get("/prescient/metrics", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 401 and "The token expired at" in response.json()["message"]
