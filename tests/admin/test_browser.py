"""The operator's console in a real browser: headless Chromium, driven by Playwright.

Needs Debian's ``chromium`` (``make test`` installs it when it can, as root) and the
``browser`` extra (``pip install -e ".[browser]"``: Playwright's client only; its own browser
downloads are never used). Outside CI, missing either skips these tests; under ``CI=true``
they fail instead. Screenshots of the pages go to ``screenshots/`` at the repository root.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from prescient.models import FutureJob, JobHistory, Worker, Workflow
from prescient.states import Outcome, State
from tests.conftest import ROOT

pytestmark = pytest.mark.browser

SCREENSHOTS = ROOT / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1440, "height": 900}
PASSWORD = "console-test-password"  # a test user's


def chromium_path() -> str | None:
    """Debian's Chromium (or ``$PRESCIENT_CHROMIUM``), if it is installed."""
    candidate = os.environ.get("PRESCIENT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    return candidate if os.access(candidate, os.X_OK) else None


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed: pip install -e '.[browser]'"
    if chromium_path() is None:
        return "Chromium is not installed: apt-get install -y chromium (make test does it as root)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}. Under CI=true the browser tests must run, not skip.")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop in this thread while the browser is open,
    # which Django's ORM takes for an async context: the tests' ORM calls (and the database
    # flush after each test) are plain synchronous ones all the same.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def console(browser: Any, transactional_db: None, make_job: Any) -> dict[str, Any]:
    """A superuser and a day in the life of the scheduler: jobs in every state, history, a worker."""
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    now = timezone.now()
    overdue = [
        make_job("test.record", workflow="nightly", next_check_at=now - timedelta(hours=2, minutes=10)),
        make_job("test.slow", workflow="nightly", next_check_at=now - timedelta(minutes=40), check_count=2),
    ]
    for index in range(14):
        make_job(
            ("test.record", "test.slow")[index % 2],
            workflow=("nightly", "onboarding", "")[index % 3],
            next_check_at=now + timedelta(minutes=25 + 95 * index),
            check_count=index % 4,
        )
    make_job(
        "test.slow", state=State.RUNNING, next_check_at=now - timedelta(minutes=3),
        reserved_by="worker:web-1:4242", reserved_at=now - timedelta(minutes=2), run_count=1,
    )
    make_job("test.record", state=State.PAUSED, last_state=State.SCHEDULED, workflow="onboarding",
             next_check_at=now + timedelta(hours=3))
    buried = make_job(
        "test.slow", state=State.BURIED, next_check_at=now - timedelta(hours=5), run_count=3, failure_count=3,
        last_error="TimeoutError: check took longer than 2 s",
        recent_errors=[
            {"at": (now - timedelta(hours=h)).isoformat(), "error": "TimeoutError: check took longer than 2 s"}
            for h in (7, 6, 5)
        ],
    )
    for name in ("nightly", "onboarding"):
        Workflow.objects.get_or_create(name=name)
    JobHistory.objects.bulk_create(history(buried, now))
    Worker.objects.create(
        name="worker:web-1:4242", hostname="web-1", pid=4242, concurrency=4, started_at=now - timedelta(hours=6),
        heartbeat_at=now - timedelta(seconds=3), last_slot_at=now - timedelta(minutes=5), jobs_done=1834,
    )
    return {"now": now, "overdue": overdue, "buried": buried}


def history(job: FutureJob, now: datetime) -> list[JobHistory]:
    """A week of finished jobs: mostly completed, some ended otherwise, busier by day."""
    outcomes = [Outcome.COMPLETED] * 12 + [
        Outcome.MAX_CHECKS, Outcome.FAILED, Outcome.KILLED, Outcome.CANCELLED, Outcome.HORIZON,
        Outcome.ENTITY_MISSING,
    ]
    rows = []
    for index in range(420):
        finished = now - timedelta(minutes=23 * index + (index * 7) % 11)
        if 1 <= (finished.hour + 2) % 24 <= 6 and index % 3:  # quieter nights
            continue
        rows.append(
            JobHistory.from_job(
                job, outcomes[(index * 5) % len(outcomes)], finished,
                check_count=index % 5, run_count=1 + index % 5, total_run_seconds=0.05 + (index % 13) * 0.21,
                created_at=finished - timedelta(hours=3 + index % 20), first_check_at=finished - timedelta(hours=3),
                reason="cancelled" if index % 17 == 0 else "",
            )
        )
    return rows


def screenshot(page: Any, name: str, *, full_page: bool = False) -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    target = SCREENSHOTS / name
    page.screenshot(path=str(target), full_page=full_page)
    return target


def login(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def message(page: Any, text: str) -> None:
    """Wait for the admin's message ``text`` on the page (after the action's redirect)."""
    from playwright.sync_api import expect

    expect(page.locator("ul.messagelist li").filter(has_text=text)).to_have_count(1)


def run_action(page: Any, action: str) -> None:
    """Select every row shown and run ``action`` from the changelist's action bar."""
    page.check("#action-toggle")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def test_console__an_operator_pauses_releases_kills_and_reads_the_dashboard(live_server, browser, console):
    from playwright.sync_api import expect

    base = live_server.url
    jobs = f"{base}/admin/prescient/futurejob/"
    context = browser.new_context(viewport=VIEWPORT, color_scheme="light")
    page = context.new_page()
    rows = page.locator("#result_list tbody tr")
    results = page.locator("#result_list")
    try:
        login(page, base)

        # The list, then filtered to overdue jobs from the filter sidebar.
        page.click("a[href$='/admin/prescient/futurejob/']")
        expect(rows).to_have_count(19)
        screenshot(page, "admin-jobs.png")
        page.click("#changelist-filter a[href*='due=overdue']")
        page.wait_for_url(re.compile(r"due=overdue"))
        expect(rows).to_have_count(3)  # the two late ones and the buried one: overdue, not in flight
        expect(results).to_contain_text("overdue by")
        page.click("#changelist-filter a[href*='state__exact=scheduled']")
        page.wait_for_url(re.compile(r"state__exact=scheduled"))
        expect(rows).to_have_count(2)
        screenshot(page, "admin-jobs-overdue.png")

        run_action(page, "pause_jobs")
        message(page, "Paused 2 jobs.")
        expect(rows).to_have_count(0)  # the filter still says "scheduled"
        overdue = [job.pk for job in console["overdue"]]
        assert set(FutureJob.objects.filter(pk__in=overdue).values_list("state", flat=True)) == {State.PAUSED}
        page.goto(f"{jobs}?due=overdue&state__exact=paused")
        expect(rows).to_have_count(2)
        expect(rows.filter(has_text="Paused")).to_have_count(2)

        run_action(page, "release_jobs")
        message(page, "Released 2 jobs.")
        page.goto(f"{jobs}?due=overdue&state__exact=scheduled")
        expect(rows.filter(has_text="Scheduled")).to_have_count(2)

        # Kill one, with a reason, through the confirmation page.
        first = console["overdue"][0]
        page.check(f"input.action-select[value='{first.pk}']")
        page.select_option("select[name=action]", "kill_jobs")
        page.click("button[name=index]")
        page.wait_for_selector("body.prescient-kill-confirmation")
        page.fill("textarea[name=reason]", "duplicate order, checked by hand")
        page.click("input[type=submit]")
        message(page, "Killed 1 job.")
        expect(rows).to_have_count(1)
        assert JobHistory.objects.get(job_id=first.pk).reason == "duplicate order, checked by hand"

        # A job's page: read-only, with its recent errors.
        page.goto(f"{jobs}?state__exact=buried")
        page.click("#result_list tbody tr th a")
        page.wait_for_url(re.compile(rf"/futurejob/{console['buried'].pk}/change/"))
        expect(page.locator("#content")).to_contain_text("TimeoutError")
        expect(page.locator("input[name=_save]")).to_have_count(0)
        screenshot(page, "admin-job-detail.png", full_page=True)

        # A workflow, paused and released by its row's buttons.
        page.goto(f"{base}/admin/prescient/workflow/")
        nightly = FutureJob.objects.filter(workflow="nightly", state=State.SCHEDULED).count()
        page.click("tr:has-text('nightly') button[value=pause]")
        message(page, f"Paused workflow nightly: {nightly} jobs paused.")
        assert Workflow.objects.get(name="nightly").is_paused
        screenshot(page, "admin-workflows.png")
        page.click("tr:has-text('nightly') button[value=release]")
        message(page, f"Released workflow nightly: {nightly} jobs released.")
        assert not Workflow.objects.get(name="nightly").is_paused

        # The dashboard, from prescient's page of the admin index.
        page.goto(f"{base}/admin/")
        page.click("a[href='/admin/prescient/']")
        page.click(".prescient-dashboard-link th a")
        page.wait_for_url(re.compile(r"/dashboard/$"))
        expect(page.locator(".prescient-chart svg")).to_have_count(3)
        for key in ("due", "day", "week"):
            assert page.locator(f"#prescient-chart-{key} svg rect").count() > 0, key
        expect(page.locator("#prescient-workers")).to_contain_text("web-1")
        expect(page.locator("#prescient-oldest")).to_contain_text("overdue by")
        screenshot(page, "admin-dashboard.png", full_page=True)

        # A history row, opened from the history list.
        page.goto(f"{base}/admin/prescient/jobhistory/")
        page.click("#result_list tbody tr:first-child th a")
        page.wait_for_url(re.compile(r"/jobhistory/\d+/change/"))
        expect(page.locator("#content")).to_contain_text("duplicate order, checked by hand")
        screenshot(page, "admin-history-detail.png")
    finally:
        context.close()


def test_console__renders_in_dark_mode(live_server, browser, console):
    from playwright.sync_api import expect

    context = browser.new_context(viewport=VIEWPORT, color_scheme="dark")
    page = context.new_page()
    try:
        login(page, live_server.url)
        page.goto(f"{live_server.url}/admin/prescient/futurejob/dashboard/")
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(18, 18, 18)"
        expect(page.locator("#prescient-chart-week svg rect").first).to_be_visible()
        screenshot(page, "admin-dashboard-dark.png", full_page=True)
        page.goto(f"{live_server.url}/admin/prescient/futurejob/")
        screenshot(page, "admin-jobs-dark.png")
    finally:
        context.close()


def only_this_machine(context: Any) -> list[str]:
    """Abort every request that leaves this machine (no internet, as on an air-gapped server);
    returns the list the blocked URLs are added to."""
    blocked: list[str] = []

    def route(request_route: Any) -> None:
        host = urlsplit(request_route.request.url).hostname or ""
        if host in ("localhost", "127.0.0.1", "::1"):
            request_route.continue_()
        else:
            blocked.append(request_route.request.url)
            request_route.abort()

    context.route("**/*", route)
    return blocked


def test_api_docs__render_the_operations_without_internet(live_server, browser, transactional_db):
    from playwright.sync_api import expect

    context = browser.new_context(viewport=VIEWPORT)
    blocked = only_this_machine(context)
    page = context.new_page()
    try:
        page.goto(f"{live_server.url}/prescient/docs")
        expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
        assert page.locator(".swagger-ui .opblock").count() >= 10  # tasks, workflows, schedules, history…
        expect(page.locator(".swagger-ui")).to_contain_text("/prescient/tasks")
        assert blocked == []  # nothing was even asked of the internet
        screenshot(page, "api-docs.png")
    finally:
        context.close()


@pytest.mark.parametrize("path", ["futurejob", "jobhistory"])
def test_lists__fit_a_1400_px_window(live_server, browser, console, path):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        login(page, live_server.url)
        page.goto(f"{live_server.url}/admin/prescient/{path}/")
        page.wait_for_selector("#result_list tbody tr")
        # The page does not scroll sideways, nor does the list inside it (the admin puts the table
        # in a box that scrolls rather than widen the page: columns would hide behind that scroll).
        widths = page.evaluate(
            """() => {
                const page = document.documentElement, results = document.querySelector('#changelist .results');
                return {page: page.scrollWidth, window: page.clientWidth,
                        list: results.scrollWidth, box: results.clientWidth};
            }"""
        )
        screenshot(page, f"admin-{path}-1400.png")
        assert widths["page"] <= widths["window"], widths
        assert widths["list"] <= widths["box"], widths
    finally:
        context.close()
