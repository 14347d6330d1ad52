"""The admin and workflows: parents and children on a job's page, the waiting filter, and the
workflow's graph drawn as SVG on the server (no JavaScript), readable with 50 jobs."""

import re

import pytest
from django.urls import reverse

import prescient
from prescient.models import JobHistory

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(make_thing, t0):
    charge = prescient.schedule(make_thing(), "test.record", workflow="order-42", now=t0)
    pack = prescient.schedule(make_thing(), "test.record", workflow="order-42", after=[charge], now=t0)
    ship = prescient.schedule(make_thing(), "test.record", workflow="order-42", after=[charge, pack], now=t0)
    return charge, pack, ship


def test_job_page__lists_parents_and_children_linked_with_their_states(admin_client, order, t0):
    charge, pack, ship = order
    page = admin_client.get(reverse("admin:prescient_futurejob_change", args=[pack.pk])).content.decode()
    # The check and the entity first, the job's id second (not "#17", which reads like an order number).
    assert "runs after" in page
    assert f"test.record · testapp.thing:{charge.entity_key}</a> <small>(job {charge.pk})" in page
    assert f"test.record · testapp.thing:{ship.entity_key}</a> <small>(job {ship.pk})" in page
    assert reverse("admin:prescient_futurejob_change", args=[ship.pk]) in page and "Waiting" in page

    prescient.tick(t0)
    row = JobHistory.objects.get(job_id=pack.pk)
    page = admin_client.get(reverse("admin:prescient_jobhistory_change", args=[row.pk])).content.decode()
    assert f"(job {charge.pk})" in page and "Completed" in page


def test_job_list__filters_waiting_jobs(admin_client, order):
    changelist = reverse("admin:prescient_futurejob_changelist")
    assert "?state__exact=waiting" in admin_client.get(changelist).content.decode()
    text = admin_client.get(changelist + "?state__exact=waiting").content.decode()
    assert text.count('class="action-select"') == 2  # pack and ship, not charge


def test_workflow_graph__draws_nodes_and_arrows_without_javascript(admin_client, order):
    listing = admin_client.get(reverse("admin:prescient_workflow_changelist")).content.decode()
    url = reverse("admin:prescient_workflow_graph", args=["order-42"])
    assert url in listing
    page = admin_client.get(url).content.decode()
    start = page.index('<div class="module prescient-graph">')
    svg = page[start:page.index("</svg>", start)]
    assert svg.count('class="node"') == 3 and svg.count("<line ") == 3  # charge→pack, charge→ship, pack→ship
    assert "<script" not in svg and "http://" not in svg.replace("http://www.w3.org/2000/svg", "")


def test_workflow_graph__of_50_jobs_fits_in_columns(admin_client, make_thing, t0):
    root = prescient.schedule(make_thing(), "test.record", workflow="big", now=t0)
    middle = [prescient.schedule(make_thing(), "test.record", workflow="big", after=[root], now=t0) for _ in range(48)]
    prescient.schedule(make_thing(), "test.record", workflow="big", after=middle, now=t0)
    page = admin_client.get(reverse("admin:prescient_workflow_graph", args=["big"])).content.decode()
    assert page.count('class="node"') == 50 and page.count("<line ") == 96
    width, height = map(int, re.search(r'viewBox="0 0 (\d+) (\d+)"', page).groups())
    node_w = int(re.search(r'<rect x="\d+" y="\d+" width="(\d+)"', page).group(1))
    columns = set(re.findall(r'<rect x="(\d+)"', page))
    assert len(columns) == 3 and width < 3 * (node_w + 60) + 20  # three columns; the 48 siblings stacked in one
    assert height < 48 * 50


def test_workflow_graph__needs_view_permission(client, django_user_model):
    user = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    client.force_login(user)
    assert client.get(reverse("admin:prescient_workflow_graph", args=["order-42"])).status_code == 403


def test_workflow_graph__labels_are_never_truncated(admin_client, make_thing, t0):
    thing = make_thing()
    prescient.schedule(thing, "test.record", workflow="w", now=t0)
    page = admin_client.get(reverse("admin:prescient_workflow_graph", args=["w"])).content.decode()
    assert f">test.record · testapp.thing:{thing.pk}</text>" in page  # whole, no "…"
    start = page.index('<div class="module prescient-graph">')
    assert "…" not in page[start:page.index("</svg>", start)]
