"""#35 item 3 (and 10): the workflow graph in a browser, laid out in layers (a child beside or
below its parent, in the next layer: with 34 jobs, arrows crossed many rows when each layer was
stacked from the top), finished jobs folded beyond a limit, and scrollable in its own box at
420 px (it was clipped). Same browser and data as tests/admin/test_browser.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse

import prescient
from prescient.admin.graph import FINISHED_SHOWN, GAP_Y, NODE_H
from prescient.models import JobHistory, JobLink, Workflow
from tests.admin import test_browser
from tests.admin.test_browser import screenshot
from tests.admin.test_console_layout import page_at, sideways

pytestmark = pytest.mark.browser

browser = test_browser.browser
console = test_browser.console

ROW = NODE_H + GAP_Y
NODES = """() => Object.fromEntries([...document.querySelectorAll('.prescient-graph g.node')].map(g => {
  const r = g.querySelector('rect').getBoundingClientRect();
  return [g.dataset.job, {left: r.left, right: r.right, top: r.top, text: g.textContent.trim()}];
}))"""


def tree_of_34(make_thing: Any, now: Any) -> None:
    """A root, 5 leaves after it, 4 branches each with 3 children, each child with one more: 34."""
    def job(*after: Any) -> Any:
        return prescient.schedule(make_thing(), "test.record", workflow="big-order", after=list(after),
                                  now=now + timedelta(hours=1))
    root = job()
    for _ in range(5):
        job(root)
    branches = [job(root) for _ in range(4)]
    children = [job(branch) for branch in branches for _ in range(3)]
    for child in children:
        job(child)
    Workflow.objects.get_or_create(name="big-order")


@pytest.mark.parametrize("width", [1024, 1600])
def test_graph__each_child_in_a_later_layer_beside_or_below_its_parent(live_server, browser, console, make_thing,
                                                                      width):
    tree_of_34(make_thing, console["now"])
    context, page = page_at(browser, live_server, width)
    try:
        page.goto(live_server.url + reverse("admin:prescient_workflow_graph", args=["big-order"]))
        page.wait_for_selector(".prescient-graph g.node")
        screenshot(page, f"admin-workflow-graph-34-{width}.png")
        nodes = page.evaluate(NODES)
        assert len(nodes) == 34
        spans = []
        for parent, child in JobLink.objects.values_list("parent_id", "child_id"):
            above, below = nodes[str(parent)], nodes[str(child)]
            assert below["left"] > above["right"], (parent, child)  # a later layer, to the right
            assert below["top"] >= above["top"], (parent, child)  # beside or below, never above
            spans.append(round((below["top"] - above["top"]) / ROW))
        # Beside their parents: most arrows run straight across, none crosses the whole graph.
        assert sum(span == 0 for span in spans) >= 9, spans
        assert max(spans) <= 8 and sum(spans) / len(spans) <= 3, spans
        assert sideways(page)["page"] <= sideways(page)["window"]
    finally:
        context.close()


def test_graph__folds_finished_jobs_beyond_the_limit_and_scrolls_in_its_box_at_420_px(live_server, browser, console,
                                                                                       make_thing):
    now = console["now"]
    done = [prescient.schedule(make_thing(), "test.record", workflow="batch", now=now - timedelta(hours=1))
            for _ in range(FINISHED_SHOWN + 8)]
    prescient.tick(now)
    assert JobHistory.objects.filter(workflow="batch").count() == len(done)
    pending: list[Any] = []
    for _ in range(3):  # a chain: three layers, wider than a phone
        pending.append(prescient.schedule(make_thing(), "test.slow", workflow="batch", after=pending[-1:],
                                          now=now + timedelta(hours=1)))
    Workflow.objects.get_or_create(name="batch")
    context, page = page_at(browser, live_server, 420)
    try:
        page.goto(live_server.url + reverse("admin:prescient_workflow_graph", args=["batch"]))
        page.wait_for_selector(".prescient-graph g.node")
        screenshot(page, "admin-workflow-graph-folded-420.png", full_page=True)
        nodes = page.evaluate(NODES)
        assert len(nodes) == FINISHED_SHOWN + len(pending) + 1, sorted(nodes)
        assert all(str(job.pk) in nodes for job in pending)
        assert nodes["folded"]["text"].startswith("+8 more finished")
        link = page.locator(".prescient-graph a:has(g.folded)").get_attribute("href")
        assert link == reverse("admin:prescient_jobhistory_changelist") + "?q=batch"
        # Wider than the phone: it scrolls in its own box (overflow: auto), not the page.
        box = page.evaluate(
            """() => { const b = document.querySelector('.prescient-graph'), s = getComputedStyle(b);
                       return {overflow: s.overflowX, content: b.scrollWidth, width: b.clientWidth,
                               right: b.getBoundingClientRect().right}; }"""
        )
        assert box["overflow"] == "auto" and box["content"] > box["width"], box
        assert box["right"] <= 420, box
        assert sideways(page)["page"] <= sideways(page)["window"]
        page.evaluate("() => { const b = document.querySelector('.prescient-graph'); b.scrollLeft = b.scrollWidth; }")
        last = max(nodes.values(), key=lambda n: n["right"])
        after = page.evaluate(NODES)
        moved = next(n for n in after.values() if n["text"] == last["text"])
        assert moved["right"] <= 420, (last, moved)  # the last layer can be scrolled into view
    finally:
        context.close()
