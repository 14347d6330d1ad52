"""The dashboard refreshes itself (#35 item 2), in a real browser: a job added meanwhile appears
in the health table without a reload; Pause stops that, is kept across reloads (localStorage),
and Resume refreshes at once. The period is 1 s here (15 s in use); the waits are Playwright's."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from prescient.admin import dashboard
from tests.admin.test_browser import browser, console, login  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

DASHBOARD = "/admin/prescient/futurejob/dashboard/"


def test_new_figures_without_a_reload__pause_kept_across_reloads__resume(
    live_server, browser, console, make_job, monkeypatch  # noqa: F811
):
    from playwright.sync_api import expect

    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 1)
    context = browser.new_context(viewport={"width": 1344, "height": 900})
    page = context.new_page()
    try:
        login(page, live_server.url)
        page.goto(live_server.url + DASHBOARD)
        button = page.locator("#prescient-refresh-toggle")
        expect(button).to_have_text("Pause")
        expect(page.locator("#prescient-refresh-note")).to_have_text("Refreshes every 1 s.")
        new_row = page.locator('#prescient-health tr[data-check="test.fresh"]')
        expect(new_row).to_have_count(0)

        make_job("test.fresh", next_check_at=timezone.now() - timedelta(minutes=20))
        expect(new_row).to_have_count(1, timeout=10_000)  # fetched, no reload
        late = new_row.locator('td[data-label="oldest overdue"] a')
        expect(late).to_have_text(re.compile(r"^by 20m(\d+s)?$"))
        first = late.text_content()
        expect(late).not_to_have_text(first or "", timeout=10_000)  # the seconds move on: fetched again

        button.click()
        expect(button).to_have_text("Resume")
        expect(button).to_have_attribute("aria-pressed", "true")
        assert page.evaluate("localStorage.getItem('prescient.dashboard.paused')") == "1"
        page.reload()
        expect(button).to_have_text("Resume")  # kept across reloads
        expect(page.locator("#prescient-refresh-note")).to_have_text(
            "Paused: the figures stay as they are until you resume."
        )
        make_job("test.later", next_check_at=timezone.now() + timedelta(hours=1))
        later = page.locator('#prescient-health tr[data-check="test.later"]')
        page.wait_for_timeout(2_500)  # two periods: paused, nothing is fetched
        expect(later).to_have_count(0)

        button.click()
        expect(button).to_have_text("Pause")
        expect(later).to_have_count(1, timeout=10_000)  # resumed: fetched at once
        assert page.evaluate("localStorage.getItem('prescient.dashboard.paused')") is None
    finally:
        context.close()
