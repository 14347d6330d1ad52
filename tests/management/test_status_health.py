"""``prescient_status`` shows each check's health (#35 item 2): a line of figures per check and its
last error beneath, in text and in ``--json``; ``--health-minutes`` chooses the window."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.test_health import NOW, hour  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def status(*args: str) -> str:
    out = StringIO()
    call_command("prescient_status", "--now", NOW.isoformat(), *args, stdout=out)
    return out.getvalue()


def test_text__a_line_per_check_and_its_last_error(hour):  # noqa: F811
    lines = status().splitlines()
    start = lines.index("checks: 2 (health over the past 60 minutes)")
    assert lines[start + 1:start + 4] == [
        (
            "  test.bill  runs=0 (0/min) failed runs=0 failure rate=- finished=0 failed=0 run time p50=- p95=- "
            "pending=3 due=2 oldest overdue=30m"
        ),
        (
            "  test.ship  runs=6 (0.1/min) failed runs=3 failure rate=50.0% finished=4 failed=1 run time p50=2.5s "
            "p95=3.85s pending=1 due=0 oldest overdue=-"
        ),
        (
            f"    last error: 2026-11-22T11:50:00+00:00 failed (history {hour['last'].pk}, builtins.TimeoutError): "
            "TimeoutError: carrier down"
        ),
    ]


def test_json__the_health_of_each_check(hour):  # noqa: F811
    report = json.loads(status("--json", "--health-minutes", "90"))["health"]
    assert (report["minutes"], report["since"], report["until"]) == (
        90, "2026-11-22T10:30:00+00:00", "2026-11-22T12:00:00+00:00"
    )
    bill, ship = report["checks"]
    assert bill == {
        "name": "test.bill", "finished": 0, "failed": 0, "runs": 0, "failed_runs": 0, "runs_per_minute": 0.0,
        "failure_rate": None, "run_seconds_p50": None, "run_seconds_p95": None, "last_error": None,
        "pending": 3, "pending_estimated": False, "due": 2, "due_estimated": False,
        "oldest_overdue_seconds": 1800.0, "held": 0,
        "held_by": {},
    }
    assert (ship["finished"], ship["runs"], ship["failed_runs"]) == (5, 11, 8)
    assert ship["last_error"] == {
        "history_id": hour["last"].pk, "finished_at": "2026-11-22T11:50:00+00:00", "outcome": "failed",
        "exception_class": "builtins.TimeoutError", "error": "TimeoutError: carrier down\nTraceback ...",
        "entity_name": "testapp.thing", "entity_key": "7",
    }


@pytest.mark.parametrize("minutes", ["0", "10081", "an hour"])
def test_health_minutes_out_of_range__refused_naming_the_range(db, minutes):
    with pytest.raises(CommandError, match="from 1 to 10,080"):
        status("--health-minutes", minutes)


def test_nothing_anywhere__says_so(db):
    assert json.loads(status("--json"))["health"]["checks"] == []
    assert "checks: none finished a job in the past 60 minutes, none pending" in status().splitlines()
