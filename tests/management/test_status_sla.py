"""``prescient_status`` shows each expectation's SLA (#34 item 9): its totals and time to met, a
line per day, in text and in ``--json``; ``--sla-days`` chooses the days."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.kinds.test_expectations_sla import NOW, week  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def status(*args: str) -> str:
    out = StringIO()
    call_command("prescient_status", "--now", NOW.isoformat(), *args, stdout=out)
    return out.getvalue()


def test_text__totals_time_to_met_and_a_line_per_day(week):  # noqa: F811
    lines = status("--sla-days", "3").splitlines()
    # The 24-hour line counts 3 met: yesterday's ended 3 h 45 min before those 24 hours.
    start = lines.index("  test.expect  model=testapp.thing ladder=[1h, 2h, 3h] pending=0 met=3 missed=1")
    assert lines[start + 1:start + 6] == [
        (
            "    SLA, 3 days to 2026-11-22 (UTC): met within rung 1=2 rung 2=1 rung 3=1 missed=1 other=1; "
            "time to met p50=30m p95=3h (of 4 met)"
        ),
        "    day         rung 1  rung 2  rung 3  missed  other",
        "    2026-11-22       1       1       1       1      1",
        "    2026-11-21       1       0       0       0      0",
        "    2026-11-20       0       0       0       0      0",
    ]


def test_json__the_sla_of_each_expectation(week):  # noqa: F811
    [report] = json.loads(status("--json"))["sla"]
    assert report["name"] == "test.expect"
    assert len(report["days"]) == 7
    assert report["days"][0] == {"date": "2026-11-22", "met": [1, 1, 1], "missed": 1, "other": 1}
    assert (report["met"], report["missed"], report["other"]) == ([2, 1, 1], 1, 1)
    assert (report["time_to_met_p50_seconds"], report["time_to_met_p95_seconds"]) == (1800.0, 10800.0)
    assert report["time_to_met_count"] == 4


@pytest.mark.parametrize("days", ["0", "91", "a week"])
def test_sla_days_out_of_range__refused_naming_the_range(db, days):
    with pytest.raises(CommandError, match="from 1 to 90"):
        status("--sla-days", days)


def test_no_expectation__no_sla(db):
    assert json.loads(status("--json"))["sla"] == []
    assert "SLA" not in status()
