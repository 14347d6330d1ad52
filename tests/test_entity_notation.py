"""One notation for an entity (issue #35, item 4): ``app.model:pk`` printed everywhere and
accepted everywhere, the ``#`` of versions before 0.4 still read on input."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command

import prescient
from prescient.admin.display import search_entities
from prescient.models import FutureJob
from prescient.wording import entity_text, parse_entity
from tests.testapp.models import Thing


@pytest.mark.parametrize(("text", "parsed"), [
    ("shop.order:4", ("shop.order", "4")),
    ("shop.order#4", ("shop.order", "4")),
    (" Shop.Order:4 ", ("shop.order", "4")),
    ("shop.code:a:b", ("shop.code", "a:b")),  # a key may hold the separator
    ("shop.code#a#b", ("shop.code", "a#b")),
    ("shop.order", None),
    ("order:4", None),  # no app label
    (":4", None),
    ("shop.order:", None),
])
def test_parse_entity__reads_both_separators_and_refuses_what_names_no_model_and_key(text, parsed):
    assert parse_entity(text) == parsed


def test_entity_text__is_the_model_label_colon_key():
    assert entity_text("shop.order", 4) == "shop.order:4"


@pytest.mark.django_db
@pytest.mark.parametrize("separator", [":", "#"])
def test_admin_search_and_commands__accept_both_separators_and_print_the_colon(separator, admin_client):
    thing, other = Thing.objects.create(), Thing.objects.create()
    job = prescient.schedule(thing, "test.record", delay=timedelta(hours=1))
    prescient.schedule(other, "test.record", delay=timedelta(hours=1))
    ref = f"testapp.thing{separator}{thing.pk}"
    assert list(search_entities(FutureJob.objects.all(), ref)) == [job]
    page = admin_client.get("/admin/prescient/futurejob/", {"q": ref}).content.decode()
    assert f"testapp.thing:{thing.pk}" in page and f"testapp.thing:{other.pk}" not in page
    out = io.StringIO()
    call_command("prescient_jobs", "--entity", ref, "--json", stdout=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [row["entity"] for row in rows] == [f"testapp.thing:{thing.pk}"]
    out = io.StringIO()
    call_command("prescient_jobs", "--entity", ref, stdout=out)
    assert f"testapp.thing:{thing.pk}" in out.getvalue() and "#" not in out.getvalue()
