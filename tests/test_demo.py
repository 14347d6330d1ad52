"""The demo project in a real process: ``manage.py demo --once`` sets up, seeds and ticks;
``manage.py demo`` serves the admin and runs a worker until one SIGINT stops them all.

The demo app is not installed under ``tests.settings``, so the command runs as a user would
run it: ``manage.py`` with the demo's own settings, on a fresh SQLite file (``DEMO_DB``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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
    # Six demo orders: two shipped and three unshipped are due at once, one is due later; the
    # two unshipped for ten minutes or more climb the first rung of their expectation.
    assert "prescient tick: processed=7 completed=2 " in result.stdout
    assert " rescheduled=5 " in result.stdout


def test_demo__has_a_daily_report_schedule_shown_in_the_admin_that_runs(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite3"
    result = run(["demo", "--once"], db)
    assert result.returncode == 0, result.stderr
    assert "schedule shop.late-orders-daily: every day at 08:00, Europe/Berlin, next " in result.stdout
    listed = run(["prescient_schedules"], db)
    assert listed.returncode == 0, listed.stderr
    assert "shop.late-orders-daily: shop.late_orders shop.report:1 · every day at 08:00, Europe/Berlin" in listed.stdout
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


# --- the demo as `make demo` runs it: a web server and a real worker, stopped by one Ctrl-C ----------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def descendants(pid: int) -> set[int]:
    """The processes below ``pid``, read from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def start_demo(db: Path, port: int, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env["DEMO_DB"] = str(db)
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--addrport", f"127.0.0.1:{port}", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def wait_for(what: str, condition: Callable[[], bool], demo: subprocess.Popen[str], seconds: float = 60) -> None:
    """Poll ``condition`` until it holds (bounded; the demo must still be running)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if demo.poll() is not None:
            pytest.fail(f"the demo ended before {what}:\n{demo.communicate()[0]}")
        if time.monotonic() > deadline:
            demo.kill()
            pytest.fail(f"no {what} within {seconds} s:\n{demo.communicate()[0]}")
        time.sleep(0.2)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # not migrated yet, or locked for a moment
            return []


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_demo__serves_runs_a_worker_places_orders_and_one_sigint_stops_everything(tmp_path: Path) -> None:
    db, port = tmp_path / "demo.sqlite3", free_port()
    demo = start_demo(db, port, "--order-every", "0.5")
    try:
        wait_for("admin page", lambda: answers(f"http://127.0.0.1:{port}/admin/login/"), demo)
        live = "SELECT 1 FROM prescient_worker WHERE stopped_at IS NULL"
        wait_for("live worker", lambda: bool(query(db, live)), demo)
        wait_for("new orders", lambda: bool(query(db, "SELECT 1 FROM shop_order WHERE id > 8")), demo)
        workflows = {name for (name,) in query(db, "SELECT DISTINCT workflow FROM prescient_futurejob")}
        assert {"reminders", "fulfilment"} <= workflows
        waiting = query(
            db, "SELECT count(*) FROM prescient_futurejob WHERE job_exec = 'shop.ship' AND state = 'waiting'"
        )
        assert waiting[0][0] >= 1  # ship waits for pack
        below = descendants(demo.pid)
        assert len(below) >= 4  # the web server, the worker and the worker's two children
    except BaseException:
        demo.kill()
        raise
    demo.send_signal(signal.SIGINT)  # what Ctrl-C sends the demo (its children have their own sessions)
    output, _ = demo.communicate(timeout=60)
    assert demo.returncode == 0, output
    assert "stopping the web server and the worker" in output and "demo stopped" in output
    assert "did not stop" not in output  # each stopped by its SIGINT, none killed
    assert not [pid for pid in below if alive(pid)], output
    assert query(db, "SELECT count(*) FROM prescient_worker WHERE stopped_at IS NULL") == [(0,)]


def test_demo__a_busy_port_gives_a_hint(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(["demo", "--addrport", f"127.0.0.1:{port}"], tmp_path / "demo.sqlite3")
    assert result.returncode == 1
    assert f"port {port} is busy" in result.stderr
    assert f"make demo PORT={port + 1}" in result.stderr and f"--addrport 127.0.0.1:{port + 1}" in result.stderr
    assert "Traceback" not in result.stderr
