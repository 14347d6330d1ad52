"""The demo project in a real process: ``manage.py demo --once`` sets up, seeds and ticks.

The demo app is not installed under ``tests.settings``, so the command runs as a user would
run it: ``manage.py`` with the demo's own settings, on a fresh SQLite file (``DEMO_DB``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


#: Run in the demo's own settings after ``demo --once``: the admin's Schedules pages show the
#: report's schedule, in words and with its next five occurrences; its next occurrence made
#: due now, a tick writes the report (the oldest unshipped order, Alan Turing's, placed 20
#: minutes ago, is late; Ada Lovelace's, older, was shipped).
ADMIN_AND_REPORT = """
from django.test import Client
from django.contrib.auth import get_user_model
import prescient
from prescient.engine import recurring
from prescient.models import Schedule
from project.shop.models import Report
client = Client(SERVER_NAME="127.0.0.1")
client.force_login(get_user_model().objects.get(username="admin"))
schedule = Schedule.objects.get(name="shop.late-orders-daily")
listing = client.get("/admin/prescient/schedule/").content.decode()
page = client.get(f"/admin/prescient/schedule/{schedule.pk}/change/").content.decode()
print("listed", "shop.late-orders-daily" in listing and "every day at 08:00, Europe/Berlin" in listing)
print("upcoming", page.count(" UTC · "), page.count("Europe/Berlin</li>"))
recurring.run_next_now(schedule.name)
summary = prescient.tick()
print("ran", Schedule.objects.get(pk=schedule.pk).runs, summary.processed)
print("report", Report.objects.get(name="late orders").text.replace(chr(10), " | "))
"""


def run(args: list[str], db: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env["DEMO_DB"] = str(db)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )


def test_demo__once_prints_login_and_ticks_the_seeded_orders(tmp_path: Path) -> None:
    result = run(["demo", "--once"], tmp_path / "demo.sqlite3")
    assert result.returncode == 0, result.stderr
    assert "login: http://127.0.0.1:8000/admin/  user: admin  password: admin" in result.stdout
    # Six demo orders: two shipped and three unshipped are due at once, one is due later.
    assert "prescient tick: processed=5 completed=2 " in result.stdout
    assert " rescheduled=3 " in result.stdout


def test_demo__has_a_daily_report_schedule_shown_in_the_admin_that_runs(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite3"
    result = run(["demo", "--once"], db)
    assert result.returncode == 0, result.stderr
    assert "schedule shop.late-orders-daily: every day at 08:00, Europe/Berlin, next " in result.stdout
    listed = run(["prescient_schedules"], db)
    assert listed.returncode == 0, listed.stderr
    assert "shop.late-orders-daily: shop.late_orders shop.report#1 · every day at 08:00, Europe/Berlin" in listed.stdout
    checked = run(["shell", "-v0", "-c", ADMIN_AND_REPORT], db)
    assert checked.returncode == 0, checked.stderr
    lines = dict(line.split(" ", 1) for line in checked.stdout.splitlines() if " " in line)
    assert lines["listed"] == "True"
    assert lines["upcoming"] == "5 5"  # each occurrence in UTC and in Berlin time
    assert lines["ran"] == "1 1"  # the occurrence became one job, run by the tick
    assert lines["report"].startswith("order 2 (Alan Turing) placed ")
    # Started again, the demo keeps its one schedule (saved again under the same name).
    again = run(["demo", "--once"], db)
    assert again.returncode == 0, again.stderr
    assert run(["prescient_schedules"], db).stdout.count("shop.late-orders-daily") == 1
