"""#35 item 3 (and 10): the lists keep their columns and buttons inside their box from 1024 px up
and turn into cards (a row a card, each value beside its column's title) in a narrow box; a job's
buttons stay on one aligned row. Each at the width where the issue measured the defect: Workers
at 1344 (last heartbeat, last slot and jobs done hidden), Workflows at 1024 (the graph link and
the Pause/Release buttons hidden), Schedules at 1344, the job list at 420 (everything after "Next
check" hidden), check names broken mid-word at 1344, the job page's buttons at 768 and 1024.

Same browser and data as tests/admin/test_browser.py (Debian's chromium, Playwright's client).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import prescient
from prescient.models import Workflow
from tests.admin import test_browser
from tests.admin.test_browser import screenshot
from tests.admin.test_console_layout import BROKEN_WORDS, busy_workers, page_at, sideways

pytestmark = pytest.mark.browser

browser = test_browser.browser
console = test_browser.console

LISTS = ["futurejob", "jobhistory", "worker", "workflow", "schedule"]

#: The list's box, what is wider than it, and what reaches past it (or past the window).
EDGES = """() => {
  const box = document.querySelector('#changelist .results');
  const right = Math.min(box.getBoundingClientRect().right, document.documentElement.clientWidth);
  const out = e => e.getBoundingClientRect().right > right + 1;
  const filters = document.querySelector('#changelist-filter');
  return {list: box.scrollWidth, box: box.clientWidth,
          filters: filters && (filters.getBoundingClientRect().top >= box.getBoundingClientRect().bottom
                               ? 'below' : 'beside'),
          cards: getComputedStyle(document.querySelector('#result_list thead')).display === 'none',
          heads: [...document.querySelectorAll('#result_list thead th')].filter(out).map(e => e.textContent.trim()),
          cells: [...document.querySelectorAll('#result_list tbody td, #result_list tbody th')].filter(out)
                   .map(e => e.className),
          buttons: [...document.querySelectorAll('#result_list button, #result_list a')].filter(out)
                   .map(e => e.textContent.trim())};
}"""


@pytest.fixture
def busy(console: dict[str, Any], make_job: Any, make_thing: Any) -> dict[str, Any]:
    """The console's data, with what made the lists wide: cloud hosts' workers, long check and
    workflow names, schedules."""
    busy_workers(console["now"])
    Workflow.objects.get_or_create(name="customer-onboarding-emails-2026")
    make_job("shop.send_payment_reminder_to_the_customer", workflow="customer-onboarding-emails-2026",
             next_check_at=console["now"] + timedelta(hours=1))
    for n in range(3):
        prescient.recurring(f"nightly-reconciliation-of-payment-provider-ledgers-{n}", check="test.record",
                            entity=make_thing(), cron="0 9 * * *")
    return console


@pytest.mark.parametrize("width", [420, 768, 1024, 1344, 1600])
def test_lists__keep_every_column_and_button_in_their_box(live_server, browser, busy, width):
    context, page = page_at(browser, live_server, width)
    try:
        for path in LISTS:
            page.goto(f"{live_server.url}/admin/prescient/{path}/")
            page.wait_for_selector("#result_list tbody tr")
            edges = page.evaluate(EDGES)
            screenshot(page, f"admin-{path}-{width}.png")
            assert edges["list"] <= edges["box"], (path, edges)
            assert edges["heads"] == edges["cells"] == edges["buttons"] == [], (path, edges)
            widths = sideways(page)
            assert widths["page"] <= widths["window"], (path, widths)
            # A table from 1024 px up (the filters go below the list up to 1024 px, on Django 5.2 as
            # on 6: 5.2 keeps them beside the list down to 768 px); cards at 420.
            assert edges["cards"] == (width == 420 or (width == 768 and edges["box"] <= 600)), (path, edges)
            assert edges["filters"] in (None, "below" if width <= 1024 else "beside"), (path, edges)
    finally:
        context.close()


def test_job_list__at_420_px_is_a_card_per_job_each_value_beside_its_title(live_server, browser, busy):
    context, page = page_at(browser, live_server, 420)
    try:
        page.goto(f"{live_server.url}/admin/prescient/futurejob/")
        page.wait_for_selector("#result_list tbody tr")
        screenshot(page, "admin-futurejob-420-cards.png", full_page=True)
        first = page.evaluate(
            """() => [...document.querySelector('#result_list tbody tr').querySelectorAll('td, th')]
                  .filter(c => !c.classList.contains('action-checkbox'))
                  .map(c => {
                    const label = getComputedStyle(c, '::before'), box = c.getBoundingClientRect();
                    return {label: c.dataset.label, shown: label.content, size: parseFloat(label.fontSize),
                            visible: box.width > 0 && box.right <= document.documentElement.clientWidth};
                  })"""
        )
        labels = [cell["label"] for cell in first]
        assert labels == ["Entity", "Check", "State", "Next check", "Checks used / max", "Failures", "Workflow"]
        assert all(cell["visible"] and cell["shown"] == f'"{cell["label"]}"' and cell["size"] >= 11 for cell in first)
    finally:
        context.close()


@pytest.mark.parametrize("width", [1024, 1344, 1600])
def test_lists__break_no_word_inside_a_check_worker_or_host_name(live_server, browser, busy, width):
    """Names break after their "." or ":" (and a check's "_", between words), never inside a word."""
    context, page = page_at(browser, live_server, width)
    try:
        for path, cells in (("futurejob", "td.field-check_name, th.field-check_name"),
                            ("jobhistory", "td.field-check_name, th.field-check_name"),
                            ("worker", "td.field-worker_name, th.field-worker_name, td.field-host"),
                            ("schedule", "td.field-starts")):
            page.goto(f"{live_server.url}/admin/prescient/{path}/")
            page.wait_for_selector("#result_list tbody tr")
            broken = page.evaluate(BROKEN_WORDS, cells)
            assert broken == [], (path, broken)
    finally:
        context.close()


@pytest.mark.parametrize("width", [420, 768, 1024, 1344])
def test_job_page__buttons_on_one_aligned_row_without_wrapping_a_label(live_server, browser, console, width):
    context, page = page_at(browser, live_server, width)
    try:
        page.goto(f"{live_server.url}/admin/prescient/futurejob/{console['overdue'][0].pk}/change/")
        boxes = page.evaluate(
            """() => [...document.querySelectorAll('#prescient-job-verbs button')].map(b => {
                 const r = b.getBoundingClientRect(), line = parseFloat(getComputedStyle(b).lineHeight) || 16;
                 return {text: b.textContent.trim(), top: Math.round(r.top), height: r.height, right: r.right,
                         lines: Math.round((b.clientHeight - parseFloat(getComputedStyle(b).paddingTop)
                                            - parseFloat(getComputedStyle(b).paddingBottom)) / line)};
               })"""
        )
        screenshot(page, f"admin-job-buttons-{width}.png")
        assert [b["text"] for b in boxes] == ["Pause", "Run now", "Sleep until…", "Cancel", "Kill…"]
        assert all(b["lines"] == 1 for b in boxes), boxes  # no label wraps
        assert all(b["right"] <= width for b in boxes), boxes
        if width >= 768:
            assert len({b["top"] for b in boxes}) == 1, boxes  # one row, aligned
        assert sideways(page)["page"] <= sideways(page)["window"]
    finally:
        context.close()
