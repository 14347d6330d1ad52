"""The console's layout defects of #27 (item 5), each in Chromium at the width where it showed:
the dashboard scrolled sideways (1344-1600 px and 420 px), the job list hid columns (1400 px),
the workflow graph clipped its labels and led with the job's id, a job's page had no buttons
for its verbs, and the finished jobs said "checks 0" of a job that ran once.

Same browser and data as tests/admin/test_browser.py (Debian's chromium, Playwright's client).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

import prescient
from prescient.models import FutureJob, JobHistory, Worker, Workflow
from prescient.states import Outcome, State
from tests.admin import test_browser
from tests.admin.test_browser import login, message, screenshot

pytestmark = pytest.mark.browser

browser = test_browser.browser
console = test_browser.console

#: Every width the issue tried; the defects showed at 420 and from 1344 to 1600.
WIDTHS = [420, 1344, 1400, 1600, 1920]


def page_at(browser: Any, live_server: Any, width: int) -> tuple[Any, Any]:
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
    page = context.new_page()
    login(page, live_server.url)
    return context, page


def sideways(page: Any) -> dict[str, int]:
    return page.evaluate(
        "() => ({page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth})"
    )


def busy_workers(now: Any) -> None:
    """Workers as a cloud host names them: long names and hosts (the table that overflowed)."""
    for n in range(2):
        host = f"ip-10-0-12-{30 + n}.eu-west-1.compute.internal"
        Worker.objects.create(
            name=f"worker:{host}:{412345 + n}", hostname=host, pid=412345 + n, concurrency=16,
            started_at=now - timedelta(hours=6), heartbeat_at=now - timedelta(seconds=2),
            last_slot_at=now - timedelta(minutes=5), jobs_done=1_234_567,
        )


@pytest.mark.parametrize("width", WIDTHS)
def test_dashboard__does_not_scroll_sideways(live_server, browser, console, declare, width):
    busy_workers(console["now"])
    declare("shop.shipped-within-the-promised-delivery-window")  # its SLA table: a 3-rung ladder
    context, page = page_at(browser, live_server, width)
    try:
        page.goto(f"{live_server.url}/admin/prescient/futurejob/dashboard/")
        page.wait_for_selector("#prescient-workers")
        page.wait_for_selector(".prescient-sla")
        screenshot(page, f"admin-dashboard-{width}.png", full_page=True)
        widths = sideways(page)
        assert widths["page"] <= widths["window"], widths
        # Nor does a card (or an SLA table) hide what it holds behind a scroll of its own.
        cards = page.evaluate(
            """() => [...document.querySelectorAll('.prescient-cards > .module, .prescient-sla > .module')].map(
                m => ({id: m.id, content: m.scrollWidth, box: m.clientWidth}))"""
        )
        assert all(card["content"] <= card["box"] for card in cards), cards
    finally:
        context.close()


def test_job_list__shows_every_column_at_1400_px(live_server, browser, console, make_job):
    now = console["now"]
    Workflow.objects.get_or_create(name="customer-onboarding-emails-2026")
    for state, extra in (
        (State.RESERVED, {"reserved_by": "worker:ip-10-0-12-30.eu-west-1.compute.internal:412345/3",
                          "reserved_at": now}),
        (State.RUNNING, {"reserved_by": "worker:ip-10-0-12-31.eu-west-1.compute.internal:412346/1",
                         "reserved_at": now - timedelta(minutes=95), "run_count": 12, "failure_count": 11}),
    ):
        make_job("shop.send_payment_reminder_to_the_customer", state=state, workflow="customer-onboarding-emails-2026",
                 next_check_at=now - timedelta(days=3, hours=5), check_count=123, **extra)
    # Keys as UUID primary keys give them: one long word each.
    for n, job in enumerate(FutureJob.objects.filter(job_exec="shop.send_payment_reminder_to_the_customer")):
        FutureJob.objects.filter(pk=job.pk).update(
            entity_name="shop.customersubscription", entity_key=f"9f86d081884c7d659a2feaa0c55ad01{n}"
        )
    context, page = page_at(browser, live_server, 1400)
    try:
        page.goto(f"{live_server.url}/admin/prescient/futurejob/?o=-3")
        page.wait_for_selector("#result_list tbody tr")
        screenshot(page, "admin-futurejob-1400-busy.png")
        edges = page.evaluate(
            """() => {
                const box = document.querySelector('#changelist .results');
                const right = box.getBoundingClientRect().right;
                return {list: box.scrollWidth, box: box.clientWidth,
                        hidden: [...document.querySelectorAll('#result_list thead th')]
                                .filter(th => th.getBoundingClientRect().right > right + 1)
                                .map(th => th.textContent.trim())};
            }"""
        )
        assert edges["hidden"] == [], edges
        assert edges["list"] <= edges["box"], edges
        widths = sideways(page)
        assert widths["page"] <= widths["window"], widths
    finally:
        context.close()


def test_workflow_graph__labels_fit_their_nodes_and_lead_with_check_and_entity(live_server, browser, console,
                                                                                make_job):
    name = "order-fulfilment"
    jobs = [
        make_job(check, workflow=name, next_check_at=console["now"] + timedelta(hours=1))
        for check in ("test.record", "shop.send_payment_reminder_to_the_customer", "shop.ship")
    ]
    Workflow.objects.get_or_create(name=name)
    context, page = page_at(browser, live_server, 1440)
    try:
        page.goto(live_server.url + reverse("admin:prescient_workflow_graph", args=[name]))
        page.wait_for_selector(".prescient-graph svg g.node")
        screenshot(page, "admin-workflow-graph.png")
        nodes = page.evaluate(
            """() => [...document.querySelectorAll('.prescient-graph g.node')].map(g => {
                const rect = g.querySelector('rect');
                const x = rect.x.baseVal.value, width = rect.width.baseVal.value;
                return {job: g.dataset.job, width,
                        texts: [...g.querySelectorAll('text')].map(t => ({
                            text: t.textContent, start: t.getBBox().x, end: t.getBBox().x + t.getComputedTextLength()
                        })), x};
            })"""
        )
        assert len(nodes) == 3
        for node in nodes:
            job = next(j for j in jobs if str(j.pk) == node["job"])
            label, caption = node["texts"]
            assert label["text"] == f"{job.job_exec} · testapp.thing:{job.entity_key}"  # whole: not clipped
            assert caption["text"].startswith(f"job {job.pk} · ")  # the id second
            for text in node["texts"]:
                assert text["end"] <= node["x"] + node["width"], (node, text)  # inside its box
        widths = sideways(page)
        assert widths["page"] <= widths["window"], widths
    finally:
        context.close()


def test_job_page__buttons_for_each_verb_with_the_lists_confirmations(live_server, browser, console):
    job = console["overdue"][0]
    url = f"{live_server.url}/admin/prescient/futurejob/{job.pk}/change/"
    context, page = page_at(browser, live_server, 1440)
    buttons = page.locator("#prescient-job-verbs button")
    try:
        page.goto(url)
        assert buttons.all_text_contents() == ["Pause", "Run now", "Sleep until…", "Cancel", "Kill…"]
        screenshot(page, "admin-job-buttons.png")

        page.click("#prescient-job-verbs button[value=pause_jobs]")
        message(page, "Paused 1 job.")
        assert page.url == url
        job.refresh_from_db()
        assert job.state == State.PAUSED
        assert buttons.all_text_contents() == ["Release", "Run now", "Sleep until…", "Cancel", "Kill…"]
        page.click("#prescient-job-verbs button[value=release_jobs]")
        message(page, "Released 1 job.")

        page.click("#prescient-job-verbs button[value=run_jobs_now]")
        message(page, "1 job is due now.")

        # Sleep: the list's confirmation page asks until when, then back to the job.
        page.click("#prescient-job-verbs button[value=sleep_jobs]")
        page.wait_for_selector("body.prescient-sleep-confirmation")
        # A week ahead, within HORIZON_DAYS at any hour of the run (30 days at 09:00 was past it after midnight).
        at = (timezone.localtime() + timedelta(days=7)).replace(hour=9, minute=0, second=0, microsecond=0)
        page.fill("input[name=at]", at.strftime("%Y-%m-%dT%H:%M"))  # the date-time picker's value
        page.click("input[type=submit]")
        message(page, f"1 job sleeps until {at.strftime('%-d %b %Y %H:%M')} ({timezone.get_current_timezone_name()}).")
        assert page.url == url
        job.refresh_from_db()
        assert job.next_check_at >= at

        # Kill: the reason asked as in the list; the job ends, so its history row is shown.
        page.click("#prescient-job-verbs button[value=kill_jobs]")
        page.wait_for_selector("body.prescient-kill-confirmation")
        page.fill("textarea[name=reason]", "customer asked by phone")
        page.click("input[type=submit]")
        message(page, "Killed 1 job.")
        page.wait_for_url(re.compile(r"/jobhistory/\d+/change/$"))
        assert JobHistory.objects.get(job_id=job.pk).reason == "customer asked by phone"
        assert not FutureJob.objects.filter(pk=job.pk).exists()
    finally:
        context.close()


def test_job_page__offers_no_buttons_to_a_user_who_may_only_view(live_server, browser, console, django_user_model):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password=test_browser.PASSWORD, is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_futurejob"))
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{live_server.url}/admin/login/?next=/admin/")
        page.fill("#id_username", "viewer")
        page.fill("#id_password", test_browser.PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(f"{live_server.url}/admin/")
        page.goto(f"{live_server.url}/admin/prescient/futurejob/{console['buried'].pk}/change/")
        page.wait_for_selector("#content")
        assert page.locator("#prescient-job-verbs").count() == 0
    finally:
        context.close()


def test_finished_jobs__a_job_that_ran_once_shows_one_check(live_server, browser, console, make_thing):
    thing = make_thing()
    job = prescient.schedule(thing, "test.record", now=console["now"] - timedelta(hours=1))
    prescient.tick(console["now"])
    row = JobHistory.objects.get(job_id=job.pk)
    assert (row.outcome, row.run_count, row.check_count) == (Outcome.COMPLETED, 1, 0)
    context, page = page_at(browser, live_server, 1440)
    try:
        page.goto(f"{live_server.url}/admin/prescient/jobhistory/?q={thing.pk}&job_exec=test.record")
        cell = page.locator(f"#result_list tbody tr:has(a[href*='/jobhistory/{row.pk}/change/']) td.field-checks")
        assert cell.inner_text().strip() == "1"
        assert "checks run" in page.locator("#result_list thead").inner_text().lower()
        page.goto(f"{live_server.url}/admin/prescient/jobhistory/{row.pk}/change/")
        assert page.locator(".field-checks_run .readonly").inner_text().strip() == "1"
        assert page.locator(".field-rechecks .readonly").inner_text().strip() == "0"
        screenshot(page, "admin-history-ran-once.png")
    finally:
        context.close()


@pytest.mark.parametrize("width", [420, 1024, 1600])
def test_charts__labels_keep_their_size_and_each_outcome_its_own_colour(live_server, browser, console, width):
    """#35 item 3: the SVG scaled as one block, so its labels were 6-7 px at 420/768 and 20 px at
    1600/1920; outcomes shared three colours. Labels are HTML now, 11-14 px at every width, and
    every outcome of the legends (and the history's badges) has a colour of its own."""
    # One finished job of each outcome in the last minutes, for the legends and the badges.
    JobHistory.objects.bulk_create([
        JobHistory.from_job(console["buried"], outcome, console["now"] - timedelta(minutes=n + 1))
        for n, outcome in enumerate(Outcome)
    ])
    context, page = page_at(browser, live_server, width)
    try:
        page.goto(f"{live_server.url}/admin/prescient/futurejob/dashboard/")
        sizes = page.evaluate(
            """() => [...document.querySelectorAll('.prescient-chart .prescient-label:not(.prescient-empty)')]
                  .map(e => ({size: parseFloat(getComputedStyle(e).fontSize), height: e.getBoundingClientRect().height,
                              text: e.textContent}))"""
        )
        assert sizes, "no chart labels"
        assert all(11 <= s["size"] <= 14 and s["height"] >= 10 for s in sizes), sizes
        week = page.evaluate(
            """() => [...document.querySelectorAll('#prescient-chart-week .prescient-legend li')]
                  .map(li => [li.textContent.trim().split(' ')[0],
                              getComputedStyle(li.querySelector('.prescient-swatch')).backgroundColor])"""
        )
        assert len(week) == len(Outcome), week
        assert len({colour for _, colour in week}) == len(Outcome), week
        assert sideways(page)["page"] <= sideways(page)["window"]
        if width == 1600:
            page.goto(f"{live_server.url}/admin/prescient/jobhistory/")
            badges = page.evaluate(
                """() => [...document.querySelectorAll('#result_list span[style*="color-mix"]')]
                      .map(e => [e.textContent.trim(), getComputedStyle(e).backgroundColor])"""
            )
            by_outcome = dict(badges)
            assert len(by_outcome) >= len(Outcome) - 1, badges  # the first page may miss one
            assert len(set(by_outcome.values())) == len(by_outcome), by_outcome
    finally:
        context.close()


#: Whether a word of the cells of ``selector`` is split over two lines: each run of letters and
#: digits between spaces, ":", "." and "-" (where browsers break hyphenated words) must stay
#: on one line (one client rect).
BROKEN_WORDS = """(selector) => {
  const broken = [];
  for (const cell of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[^\\s:.()-]+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


@pytest.mark.parametrize("width", [420, 1024, 1344, 1600])
def test_dashboard__breaks_no_word_inside_a_name_or_a_heading(live_server, browser, console, width):
    """#35 item 3: "Workers alive" broke words at every width ("CONCU RRENC Y", "vm:10259
    :11b80a9 2"). Lines break between words and after a name's ":" or "."; in a card narrower
    than 480 px (at 420 px, and as one of three at 1344) the workers' table is a list."""
    busy_workers(console["now"])
    context, page = page_at(browser, live_server, width)
    try:
        page.goto(f"{live_server.url}/admin/prescient/futurejob/dashboard/")
        assert page.evaluate(BROKEN_WORDS, "#prescient-workers th, #prescient-workers td") == []
        assert sideways(page)["page"] <= sideways(page)["window"]
        card = page.evaluate("() => document.querySelector('#prescient-workers').getBoundingClientRect().width")
        header = page.evaluate("() => getComputedStyle(document.querySelector('#prescient-workers thead')).display")
        assert (header == "none") == (card <= 480), (card, header)  # a list in a narrow card
    finally:
        context.close()
