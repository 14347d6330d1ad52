"""``run_due(now)``: each due duty runs once per pass, and on PostgreSQL one process at a time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import pytest

from prescient import maintenance
from prescient.engine.sweep import Survey
from tests.conftest import ROOT, database_env, on_postgres


class Counting(maintenance.Service):
    name = "test_counting"
    interval = 3600.0

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[datetime] = []

    def run_once(self, now: datetime) -> int:
        self.calls.append(now)
        return 7


@pytest.fixture
def counting():
    service = maintenance.register(Counting())
    yield service
    maintenance._services.pop(service.name, None)


@pytest.mark.django_db
def test_run_due__runs_a_duty_whose_interval_passed_once(counting, t0):
    idle = Survey(due=False, stale=False)
    assert "test_counting" not in maintenance.run_due(t0, survey=idle)  # interval counts from start
    counting.last_run -= counting.interval
    assert maintenance.run_due(t0, survey=idle)["test_counting"] == 7
    assert "test_counting" not in maintenance.run_due(t0, survey=idle)
    assert counting.calls == [t0]


def test_builtin_duties_are_registered():
    assert {"rescuer", "worker_pruner"} <= {s.name for s in maintenance.registered_services()}


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import django
    django.setup()
    from django.utils import timezone
    from prescient import maintenance

    started, release, log = (Path(p) for p in sys.argv[1:4])

    class Slow(maintenance.Service):
        name = "test_exclusive"
        interval = 0.0
        def run_once(self, now):
            with log.open("a") as f:
                f.write(f"start {sys.argv[4]}\\n")
            started.touch()
            deadline = time.monotonic() + 30
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            with log.open("a") as f:
                f.write(f"end {sys.argv[4]}\\n")
            return 1

    for s in list(maintenance.registered_services()):
        maintenance._services.pop(s.name)
    maintenance.register(Slow())
    done = maintenance.run_due(timezone.now())
    print("ran" if "test_exclusive" in done else "skipped", flush=True)
    """
)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_processes_never_run_the_same_duty_at_once(tmp_path: Path):
    assert on_postgres()
    started, release, log = tmp_path / "started", tmp_path / "release", tmp_path / "log"
    env = {**database_env(), "DJANGO_SETTINGS_MODULE": "tests.settings"}

    def spawn(name: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(started), str(release), str(log), name],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    first = spawn("first")
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    assert started.exists(), "the first process never started its duty"
    second = spawn("second")  # the duty is held by the first process meanwhile
    out2, err2 = second.communicate(timeout=60)
    release.touch()
    out1, err1 = first.communicate(timeout=60)
    assert (first.returncode, second.returncode) == (0, 0), err1 + err2
    assert (out1.strip(), out2.strip()) == ("ran", "skipped")
    assert log.read_text().split("\n")[:2] == ["start first", "end first"]
    # Once released, the next pass may run it again.
    started.unlink()
    third = spawn("third")
    out3, err3 = third.communicate(timeout=60)
    assert out3.strip() == "ran", err3
