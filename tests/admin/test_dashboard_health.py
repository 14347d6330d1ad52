"""The dashboard's health per check (#35 item 2): a row per check (runs per minute, failure rate,
run time p50/p95, last error linked to its history row, pending and oldest overdue linked to the
jobs), a window chosen by ``?minutes=``, and the refresh every 15 s that a button pauses (a
script file, with the site's CSP nonce when it has one)."""

from __future__ import annotations

import re
from pathlib import Path

import django
import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.staticfiles import finders
from django.test import Client, override_settings
from django.utils import timezone

from tests.test_health import NOW, hour  # noqa: F401 (a fixture)

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


def health(content: str) -> str:
    found = re.search(r'<div class="module" id="prescient-health">(.*?)\n  </div>', content, re.S)
    assert found, "no health table"
    return found.group(1)


def row(html: str, check: str) -> dict[str, str]:
    """``{column label: cell html}`` of the row of ``check``, and its head under ``check``."""
    found = re.search(rf'<tr data-check="{re.escape(check)}">(.*?)</tr>', html, re.S)
    assert found, f"no row for {check}"
    cells = {"check": re.search(r"<th scope=\"row\"[^>]*>(.*?)</th>", found.group(1), re.S).group(1)}
    for label, cell in re.findall(r'<td[^>]*data-label="([^"]+)"[^>]*>(.*?)</td>', found.group(1), re.S):
        cells[label] = cell.strip()
    return cells


def test_a_row_per_check__runs_failures_run_times_last_error_pending_overdue(admin_client, hour, at_now):  # noqa: F811
    html = health(admin_client.get(DASHBOARD).content.decode())
    assert "Health per check, past 1h" in html
    assert re.findall(r'<tr data-check="([^"]+)">', html) == ["test.bill", "test.ship"]
    ship = row(html, "test.ship")
    assert ship["check"] == '<a href="/admin/prescient/jobhistory/?job_exec=test.ship">test.<wbr>ship</a>'
    assert ship["runs / min"] == "0.1"
    assert ship["failure rate"] == "50.0% <small>(3 of 6)</small>"
    assert (ship["run time p50"], ship["p95"]) == ("2.5 s", "3.9 s")
    last = hour["last"]
    assert ship["last error"] == (
        f'<a href="/admin/prescient/jobhistory/{last.pk}/change/" title="TimeoutError: carrier down\nTraceback ...">'
        "<strong>TimeoutError</strong> TimeoutError: carrier down</a><br><small>Nov. 22, 2026, 11:50 a.m.</small>"
    )
    assert ship["pending"] == '<a href="/admin/prescient/futurejob/?job_exec=test.ship">1</a>'
    assert ship["oldest overdue"] == "-"
    bill = row(html, "test.bill")
    assert (bill["runs / min"], bill["failure rate"], bill["run time p50"], bill["last error"]) == ("0", "-", "-", "-")
    assert bill["oldest overdue"] == (
        '<a class="late" href="/admin/prescient/futurejob/?job_exec=test.bill&amp;state__exact=scheduled&amp;'
        'due=overdue">by 30m</a> <small>(2 due)</small>'
    )


def test_minutes_chooses_the_window__links_to_the_others(admin_client, hour, at_now):  # noqa: F811
    html = health(admin_client.get(DASHBOARD, {"minutes": "90"}).content.decode())
    assert "Health per check, past 1h30m" in html
    assert row(html, "test.ship")["failure rate"] == "72.7% <small>(8 of 11)</small>"  # the older row too
    windows = re.search(r'<p class="prescient-windows">(.*?)</p>', html, re.S).group(1)
    assert re.findall(r'<a href="\?minutes=(\d+)">', windows) == ["15", "60", "360", "1440"]
    current = health(admin_client.get(DASHBOARD).content.decode())
    assert "<strong>1h</strong>" in current


@pytest.mark.parametrize("minutes", ["0", "10081", "an hour", ""])
def test_a_window_out_of_range__the_past_hour(admin_client, hour, at_now, minutes):  # noqa: F811
    response = admin_client.get(DASHBOARD, {"minutes": minutes})
    assert response.status_code == 200
    assert "Health per check, past 1h" in health(response.content.decode())


def test_without_the_history_permission__the_figures_and_error_but_no_links_to_history(hour, at_now):  # noqa: F811
    html = health(staff(["view_futurejob"]).get(DASHBOARD).content.decode())
    ship = row(html, "test.ship")
    assert "/admin/prescient/jobhistory/" not in html
    assert ship["check"] == "test.<wbr>ship"
    assert ship["last error"].startswith("<strong>TimeoutError</strong> TimeoutError: carrier down<br>")


def test_no_check_anywhere__says_so(admin_client, at_now):
    html = health(admin_client.get(DASHBOARD).content.decode())
    assert "<thead>" not in html
    assert "No check finished a job in the past 1h, and none has a job pending." in html


# --- the refresh ---------------------------------------------------------------------------------


def test_the_figures_refresh_every_15_s__with_a_pause_button(admin_client, at_now):
    content = admin_client.get(DASHBOARD).content.decode()
    assert '<script src="/static/prescient/dashboard.js" defer></script>' in content
    assert re.search(r'<p class="prescient-refresh" id="prescient-refresh" hidden>', content)
    button = re.search(r'<button type="button" class="button" id="prescient-refresh-toggle"[^>]*>', content).group(0)
    assert 'data-pause="Pause"' in button and 'data-resume="Resume"' in button and 'aria-pressed="false"' in button
    assert 'data-running="Refreshes every 15 s."' in content
    # What the script swaps holds every figure; the control stays outside it.
    live = content.index('<div id="prescient-live" data-refresh-seconds="15">')
    assert content.index('id="prescient-refresh-toggle"') < live < content.index('id="prescient-health"')
    assert live < content.index('id="prescient-states"') and live < content.index("Figures as of")


def test_the_script__a_file_that_keeps_the_pause_in_local_storage():
    path = finders.find("prescient/dashboard.js")
    assert path, "prescient/static/prescient/dashboard.js is not found by the static files finders"
    script = Path(path).read_text()
    assert 'localStorage.getItem(KEY) === "1"' in script and '"prescient.dashboard.paused"' in script
    assert "prescient-live" in script and "document.hidden" in script
    assert "http://" not in script and "https://" not in script


@pytest.mark.skipif(django.VERSION < (6, 0), reason="Django 6 has the Content-Security-Policy middleware")
def test_with_a_csp_nonce__the_script_and_style_carry_it(admin_client, settings, at_now):
    from django.utils.csp import CSP

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csp.ContentSecurityPolicyMiddleware"]
    settings.SECURE_CSP = {"default-src": [CSP.SELF], "script-src": [CSP.SELF, CSP.NONCE],
                           "style-src": [CSP.SELF, CSP.NONCE]}
    templates = [{**settings.TEMPLATES[0]}]
    templates[0]["OPTIONS"] = {"context_processors": [
        *settings.TEMPLATES[0]["OPTIONS"]["context_processors"], "django.template.context_processors.csp",
    ]}
    with override_settings(TEMPLATES=templates):
        response = admin_client.get(DASHBOARD)
    nonce = re.search(r"'nonce-([^']+)'", response["Content-Security-Policy"]).group(1)
    content = response.content.decode()
    assert f'<script src="/static/prescient/dashboard.js" defer nonce="{nonce}"></script>' in content
    assert f'<style nonce="{nonce}">' in content
