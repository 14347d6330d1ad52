"""The demo in a real browser, started as ``make demo`` starts it (``manage.py demo``: the web
server, a real ``prescient_worker`` and new orders), on a temporary SQLite file and a free port.

The dashboard must come to show a live worker and jobs finished; its screenshot is
``docs/img/demo-dashboard.png`` (the README shows it; PRESCIENT_UPDATE_SCREENSHOT=1 rewrites it).
The waits are bounded; nothing here asserts how long anything took.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.admin import test_browser
from tests.admin.test_browser import VIEWPORT, screenshot
from tests.conftest import ROOT
from tests.test_demo import answers, free_port, start_demo

#: Headless Chromium, as for the console's tests (skipped without it, except under CI=true).
browser = test_browser.browser

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: The README's picture. Written by this test when PRESCIENT_UPDATE_SCREENSHOT=1 (a run that
#: should refresh it); otherwise next to the other screenshots, so a test run leaves the
#: checkout as it was.
SHOT = ROOT / "docs" / "img" / "demo-dashboard.png"


def shot_path() -> Path:
    return SHOT if os.environ.get("PRESCIENT_UPDATE_SCREENSHOT") == "1" else test_browser.SCREENSHOTS / SHOT.name


def test_demo__the_dashboard_shows_a_live_worker_and_finished_jobs(browser: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    demo = start_demo(tmp_path / "demo.sqlite3", port, "--order-every", "3")
    context = browser.new_context(viewport=VIEWPORT, color_scheme="light")
    page = context.new_page()
    try:
        deadline = time.monotonic() + 90
        while not answers(f"{base}/admin/login/"):
            assert demo.poll() is None, demo.communicate()[0]
            assert time.monotonic() < deadline, "the demo's web server did not answer"
            time.sleep(0.2)
        page.goto(f"{base}/admin/login/?next=/admin/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "admin")
        page.click("input[type=submit]")
        page.wait_for_url(f"{base}/admin/")

        workers = page.locator("#prescient-workers tbody tr")
        finished = page.locator("#prescient-chart-day g.bars rect")
        # For the README's picture, PRESCIENT_SCREENSHOT_AFTER=180 lets the demo run three
        # minutes first, as a visitor would see it.
        settle_until = time.monotonic() + float(os.environ.get("PRESCIENT_SCREENSHOT_AFTER", "0"))
        deadline = max(deadline, settle_until + 30)
        while True:  # reloaded until the worker has said it lives and has finished jobs
            page.goto(f"{base}/admin/prescient/futurejob/dashboard/")
            if workers.count() and finished.count() and time.monotonic() >= settle_until:
                break
            assert demo.poll() is None, demo.communicate()[0]
            assert time.monotonic() < deadline, "the dashboard showed no live worker with finished jobs"
            time.sleep(1)
        expect(workers.first).to_contain_text(f"({_worker_pid(demo.pid)})")
        expect(page.locator("#prescient-workers")).not_to_contain_text("No worker is alive")
        shot = shot_path()
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)

        page.goto(f"{base}/admin/prescient/workflow/")
        for name in ("fulfilment", "reminders"):
            expect(page.locator(f"tr:has-text('{name}') button[value=pause]")).to_have_count(1)
        screenshot(page, "demo-workflows.png")
    finally:
        context.close()
        demo.terminate()  # SIGTERM: the demo stops its children as on Ctrl-C
        demo.communicate(timeout=60)


def _worker_pid(demo_pid: int) -> int:
    """The pid of the demo's prescient_worker (its child running ``prescient_worker``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == demo_pid and b"prescient_worker" in cmdline:
            return int(entry.name)
    raise AssertionError("the demo runs no prescient_worker")
