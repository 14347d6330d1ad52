"""The dashboard's SLA tables (#34 item 9): a card per expectation, its days as rows, a column per
rung, missed and other; time to met beneath. Same permission as the rest of the dashboard."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from tests.kinds.test_expectations_sla import NOW, week  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

DASHBOARD = "/admin/prescient/futurejob/dashboard/"


@pytest.fixture
def at_now(monkeypatch):
    """The admin asks for the real time: give it the fixture's."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def staff(perms: list[str]) -> Client:
    user = User.objects.create_user("staff", password="not-used", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="prescient", codename__in=perms))
    client = Client()
    client.force_login(user)
    return client


def card(content: str, name: str) -> str:
    pattern = rf'<div class="module" id="prescient-sla-\d+" data-expectation="{re.escape(name)}">(.*?)</div>'
    found = re.search(pattern, content, re.S)
    assert found, f"no SLA card for {name}"
    return found.group(1)


def rows(html: str) -> dict[str, list[str]]:
    """``{row head: [cells]}`` of a table's body and foot rows."""
    found = {}
    for row in re.findall(r"<tr><th scope=\"row\">(.*?)</tr>", html, re.S):
        head, _, cells = row.partition("</th>")
        found[head] = re.findall(r"<td[^>]*>(.*?)</td>", cells)
    return found


def test_a_table_per_expectation__days_rungs_missed_other_time_to_met(admin_client, week, at_now, declare):  # noqa: F811
    declare("test.other", ladder=[timedelta(hours=1)])
    content = admin_client.get(DASHBOARD).content.decode()
    assert "SLA of expectations, past 7 days" in content
    html = card(content, "test.expect")
    assert '<a href="/admin/prescient/jobhistory/?job_exec=test.expect" class="section">test.expect</a>' in html
    heads = re.findall(r'<th scope="col">(.*?)</th>', html)
    assert heads == ["1 <small>(1h)</small>", "2 <small>(2h)</small>", "3 <small>(3h)</small>"]
    table = rows(html)
    assert list(table) == ["Sun 22 Nov", "Sat 21 Nov", "Fri 20 Nov", "Thu 19 Nov", "Wed 18 Nov", "Tue 17 Nov",
                           "Mon 16 Nov", "total"]
    assert table["Sun 22 Nov"] == ["1", "1", "1", "1", "1"]  # met within rung 1, 2, 3; missed; other
    assert table["Sat 21 Nov"] == ["1", "0", "0", "0", "0"]
    assert table["Fri 20 Nov"] == ["0"] * 5
    assert table["total"] == ["2", "1", "1", "1", "1"]
    assert "Time to met: p50 30m, p95 3h (of 4 met)." in html
    other = card(content, "test.other")
    assert rows(other)["total"] == ["0", "0", "0"]
    assert "Time to met: p50 -, p95 - (of 0 met)." in other


def test_without_the_history_permission__the_table_but_no_link(week, at_now):  # noqa: F811
    content = staff(["view_futurejob"]).get(DASHBOARD).content.decode()
    html = card(content, "test.expect")
    assert "/admin/prescient/jobhistory/" not in html
    assert rows(html)["total"] == ["2", "1", "1", "1", "1"]


def test_without_the_view_permission__no_dashboard(week, at_now):  # noqa: F811
    assert staff(["view_jobhistory"]).get(DASHBOARD).status_code == 403


def test_no_expectation_declared__no_sla_section(admin_client, at_now):
    content = admin_client.get(DASHBOARD).content.decode()
    assert "prescient-sla" not in content.split("</style>", 1)[1]
