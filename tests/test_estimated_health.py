"""Past a bound, the dashboard's and the status's counts are PostgreSQL's estimates, never a
scan of the live table (#36 item 1): per state and due (prescient.status), pending and due per
check (prescient.health), said so wherever shown. The bounds are lowered so that a few rows pass them;
after ANALYZE of a table this small, the statistics hold every row, so the estimates are exact."""

from __future__ import annotations

import functools
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from prescient import health as health_module
from prescient import status as status_module
from prescient.counting import counts
from prescient.health import health
from prescient.models import FutureJob
from prescient.states import State
from tests.test_health import NOW, M, pending

pytestmark = pytest.mark.django_db


@pytest.fixture
def low_bounds(monkeypatch):
    monkeypatch.setattr(health_module, "EXACT_PENDING", 5)
    monkeypatch.setattr(status_module, "counts", functools.partial(counts, exact_up_to=5))


@pytest.fixture
def live():
    for key in range(8):
        pending("test.ship", str(key), NOW + M)
    for key in range(3):
        pending("test.bill", str(key), NOW - (key + 1) * M)  # 3 due, the oldest 3 minutes late
    pending("test.bill", "9", NOW - M, state=State.PAUSED)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {FutureJob._meta.db_table}")


def test_pending_per_check__estimated_past_the_bound_due_still_exact(live, low_bounds):
    report = {c.name: (c.pending, c.pending_estimated, c.due, c.oldest_overdue_seconds) for c in health(NOW).checks}
    estimated = connection.vendor == "postgresql"
    assert report == {"test.bill": (4, estimated, 3, 180.0), "test.ship": (8, estimated, 0, None)}
    assert [c.name for c in health(NOW, names=["test.ship"]).checks] == ["test.ship"]


def test_the_estimate_reads_no_row_of_the_live_table(live, low_bounds):
    if connection.vendor != "postgresql":
        pytest.skip("the estimate is PostgreSQL's")
    with CaptureQueriesContext(connection) as queries:
        health(NOW)
    live = [q["sql"] for q in queries.captured_queries if "prescient_futurejob" in q["sql"]]
    # A count that stops at EXACT_PENDING + 1 rows, the walk of the checks' due index, and counts
    # of each check's due jobs that stop at EXACT_DUE + 1: no aggregate over the due jobs.
    assert any("COUNT(*)" in sql and "LIMIT 6" in sql for sql in live)
    assert len([sql for sql in live if "WITH RECURSIVE" in sql]) == 1
    assert any(f"LIMIT {health_module.EXACT_DUE + 1}" in sql for sql in live)
    assert not [sql for sql in live if "GROUP BY" in sql]


def test_due_per_check__estimated_past_its_bound_the_oldest_still_exact(live, low_bounds, monkeypatch):
    """#36: a backlog of due jobs is counted per check up to EXACT_DUE, then estimated."""
    monkeypatch.setattr(health_module, "EXACT_DUE", 2)
    report = {c.name: (c.due, c.due_estimated, c.oldest_overdue_seconds) for c in health(NOW).checks}
    if connection.vendor != "postgresql":  # counted exactly
        assert report == {"test.bill": (3, False, 180.0), "test.ship": (0, False, None)}
        return
    (bill_due, bill_estimated, bill_oldest), ship = report["test.bill"], report["test.ship"]
    assert bill_estimated and bill_due >= 3 and bill_oldest == 180.0
    assert ship == (0, False, None)
    printed = StringIO()
    call_command("prescient_status", "--now", NOW.isoformat(), stdout=printed)
    assert f"due=~{bill_due}" in printed.getvalue()


def test_due_per_check__the_queries_do_not_grow_with_the_backlog(live, low_bounds, monkeypatch):
    """The due jobs of a check are counted up to the bound, whatever their number: as many
    queries, and the same bounded counts, with 3 or 23 due jobs."""
    monkeypatch.setattr(health_module, "EXACT_DUE", 2)

    def live_queries() -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            health(NOW)
        return [q["sql"] for q in queries.captured_queries if "prescient_futurejob" in q["sql"]]

    before = live_queries()
    for key in range(20):
        pending("test.bill", f"late{key}", NOW - (key + 1) * M)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {FutureJob._meta.db_table}")
    after = live_queries()
    assert len(after) == len(before)
    if connection.vendor == "postgresql":
        assert any("LIMIT 3" in sql for sql in after) and not any("GROUP BY" in sql for sql in after)


def test_the_dashboard_and_the_api_mark_an_estimated_due(live, low_bounds, monkeypatch, admin_client):
    from django.utils import timezone

    monkeypatch.setattr(health_module, "EXACT_DUE", 2)
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    page = admin_client.get("/admin/prescient/futurejob/dashboard/").content.decode()
    # Scheduled, all and pending of each check (test_the_dashboard_marks_estimates), and test.bill's due.
    assert page.count('class="prescient-approx"') == (5 if connection.vendor == "postgresql" else 0)


def test_under_the_bound__exact_and_not_marked(live):
    report = {c.name: (c.pending, c.pending_estimated) for c in health(NOW).checks}
    assert report == {"test.bill": (4, False), "test.ship": (8, False)}


def test_status__counts_per_state_and_due_estimated_past_the_bound(live, low_bounds):
    snap = status_module.snapshot(NOW)
    assert (snap.states["scheduled"], snap.states["paused"], snap.due_now) == (11, 1, 3)
    assert snap.estimated == (["scheduled"] if connection.vendor == "postgresql" else [])
    printed = StringIO()
    call_command("prescient_status", "--now", NOW.isoformat(), stdout=printed)
    text = printed.getvalue()
    if connection.vendor == "postgresql":
        assert "scheduled=~11" in text and "(~: PostgreSQL's estimate)" in text
        assert "pending=~8" in text
    else:
        assert "scheduled=11" in text and "~" not in text
    printed = StringIO()
    call_command("prescient_status", "--json", "--now", NOW.isoformat(), stdout=printed)
    assert json.loads(printed.getvalue())["estimated"] == snap.estimated


def test_the_dashboard_marks_estimates(live, low_bounds, admin_client, monkeypatch):
    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: NOW)
    page = admin_client.get("/admin/prescient/futurejob/dashboard/").content.decode()
    marks = page.count('class="prescient-approx"')
    assert marks == (4 if connection.vendor == "postgresql" else 0)  # scheduled, all, pending of each check


def test_a_chart_of_a_range_too_large_to_count__is_sampled_and_says_so(admin_client, monkeypatch):
    """The dashboard's history charts (#36 item 1): past queries.SAMPLE_ABOVE rows expected in
    their range, TABLESAMPLE over a share of the pages, scaled up, said so in the caption. A
    sample of every page gives the exact counts."""
    from datetime import timedelta

    from django.utils import timezone

    from prescient import queries
    from prescient.models import JobHistory
    from tests.test_health import finished

    for minute in range(40):
        finished("test.ship", NOW - minute * M, "completed" if minute % 4 else "failed", key=str(minute))
    exact = queries.bucket_counts(JobHistory.objects.all(), "finished_at", NOW - timedelta(hours=1), 15, key="outcome")
    if connection.vendor != "postgresql":
        assert queries.sample_percent(JobHistory.objects.all()) is None
        return
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {JobHistory._meta.db_table}")
    whole = queries.bucket_counts(JobHistory.objects.all(), "finished_at", NOW - timedelta(hours=1), 15,
                                  key="outcome", sample_percent=100.0)
    assert whole == exact and sum(exact.values()) == 40
    assert queries.sample_percent(JobHistory.objects.all()) is None  # 40 rows: counted
    monkeypatch.setattr(queries, "SAMPLE_ABOVE", 10)
    percent = queries.sample_percent(JobHistory.objects.all())  # about 10 of the table's 40 rows
    assert percent is not None and 20 <= percent <= 30
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    page = admin_client.get("/admin/prescient/futurejob/dashboard/").content.decode()
    assert page.count("% of the history&#x27;s pages") + page.count("% of the history's pages") == 2  # day, week
