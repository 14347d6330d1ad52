"""The workflows list's jobs per state are bounded (#36, prescient.admin.workflows): each cell
counted exactly up to EXACT_UP_TO, PostgreSQL's planner estimate beyond it (marked ≈, said
under the list), exact on other databases; the page's cost bounded by its rows times the states times
the bound, however many jobs a workflow has. The bound is lowered so that a few jobs pass it."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from prescient.admin import workflows
from prescient.models import FutureJob, Workflow
from prescient.states import State

pytestmark = pytest.mark.django_db

WORKFLOWS = "/admin/prescient/workflow/"
NOTE = "≈: PostgreSQL's estimate (jobs are counted exactly"


@pytest.fixture
def low_bound(monkeypatch):
    monkeypatch.setattr(workflows, "EXACT_UP_TO", 3)


@pytest.fixture
def big_and_small(make_job):
    """``big``: 8 scheduled jobs and 1 paused; ``small``: 2 scheduled."""
    for _ in range(8):
        make_job(workflow="big")
    make_job(workflow="big", state=State.PAUSED)
    for _ in range(2):
        make_job(workflow="small")
    Workflow.objects.get_or_create(name="big")
    Workflow.objects.get_or_create(name="small")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {FutureJob._meta.db_table}")


def cells(content: str, name: str) -> list[str]:
    """The row of workflow ``name``: its jobs per state, as shown (``≈`` before an estimate)."""
    row = re.search(rf'<tr[^>]*>(?:(?!</tr>).)*?>{name}</a>(?:(?!</tr>).)*</tr>', content, re.S)
    assert row is not None, name
    shown = []
    for state in ("scheduled", "reserved", "running", "paused", "buried", "waiting"):
        cell = re.search(rf'<td[^>]*class="field-{state}_jobs">(.*?)</td>', row.group(0), re.S)
        assert cell is not None, state
        shown.append(re.sub(r"<[^>]+>", "", cell.group(1)))
    return shown


def test_under_the_bound__exact_linked_and_no_note(admin_client, big_and_small):
    content = admin_client.get(WORKFLOWS).content.decode()
    assert cells(content, "big") == ["8", "0", "0", "1", "0", "0"]
    assert cells(content, "small") == ["2", "0", "0", "0", "0", "0"]
    assert "/admin/prescient/futurejob/?workflow=big&amp;state__exact=scheduled" in content
    assert NOTE not in content and "prescient-approx" not in content


def test_past_the_bound__the_cell_is_an_estimate_said_so(admin_client, big_and_small, low_bound):
    response = admin_client.get(WORKFLOWS)
    content = response.content.decode()
    assert cells(content, "small") == ["2", "0", "0", "0", "0", "0"]  # under the bound: exact
    big = cells(content, "big")
    assert big[1:] == ["0", "0", "1", "0", "0"]
    if connection.vendor != "postgresql":  # other databases count exactly
        assert big[0] == "8" and NOTE not in content and not response.context["cl"].cells_estimated
        return
    assert big[0].startswith("≈") and int(big[0][1:]) > 3  # the planner's estimate, never below the bound
    assert content.count('class="prescient-approx"') == 1
    assert NOTE in content and response.context["cl"].cells_estimated
    # Still a link to the jobs it counts.
    assert "/admin/prescient/futurejob/?workflow=big&amp;state__exact=scheduled" in content


def test_each_cell_reads_at_most_the_bound(admin_client, big_and_small, low_bound):
    """The list's query counts at most EXACT_UP_TO + 1 jobs per cell (no COUNT of a whole
    workflow), and the estimates beyond add one query per such cell, not per job."""
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(WORKFLOWS)
    jobs = [q["sql"] for q in queries.captured_queries if "prescient_futurejob" in q["sql"]]
    listed = [sql for sql in jobs if "prescient_workflow" in sql]
    assert len(listed) == 1  # the page's rows and their cells, in one query
    assert listed[0].count("LIMIT 4") == len(State)
    others = [sql for sql in jobs if sql not in listed]
    # The one cell beyond the bound: its estimate (PostgreSQL) or its exact count (elsewhere).
    assert len(others) == 1


def test_ordered_by_a_state__capped_counts_then_names(admin_client, big_and_small, make_job, low_bound):
    for _ in range(5):
        make_job(workflow="also_big")
    Workflow.objects.get_or_create(name="also_big")
    scheduled = workflows.WorkflowAdmin.list_display.index("scheduled_jobs") + 1
    response = admin_client.get(WORKFLOWS, {"o": f"-{scheduled}"})
    names = [w.name for w in response.context["cl"].result_list]
    # Both beyond the bound count as "more than 3" (among them, by name).
    assert names == ["also_big", "big", "small"]
    response = admin_client.get(WORKFLOWS, {"o": str(scheduled)})
    assert response.context["cl"].result_list[0].name == "small"


def test_the_change_page_shows_the_same_cells(admin_client, big_and_small, low_bound):
    content = admin_client.get("/admin/prescient/workflow/big/change/").content.decode()
    assert ("≈" in content) == (connection.vendor == "postgresql")
