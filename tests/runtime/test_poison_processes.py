"""prescient_tick as a real process beside poison jobs, on SQLite and PostgreSQL (issue #32):
a job that raises SystemExit or KeyboardInterrupt is charged and its batch-mates run; an
operator's Ctrl-C or SIGTERM hands back what has not run, uncharged."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta

import pytest

from prescient.models import FutureJob, JobHistory
from prescient.states import State
from tests.conftest import ROOT, database_env
from tests.faults.conftest import seed, wait_until
from tests.testapp.models import RunLog

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def start_tick(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "django", "prescient_tick", "--settings=tests.settings", *args],
        cwd=ROOT, env=database_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_a_tick_with_system_exit_and_keyboard_interrupt_jobs__charges_them_and_runs_its_batch_mates():
    exit2 = seed(1, "fault.poison", name="exit2")[0]
    interrupt = seed(1, "fault.poison", name="interrupt")[0]
    seed(20, "fault.slow", name="0")
    tick = start_tick("--batch-size", "100")
    out, err = tick.communicate(timeout=60)
    assert tick.returncode == 0, out + err
    [line] = out.strip().splitlines()  # one line, as always
    assert line.startswith("prescient tick: processed=22 completed=20 ") and " retried=2 " in line, line
    assert JobHistory.objects.filter(job_exec="fault.slow", outcome="completed").count() == 20
    for thing, path in ((exit2, "builtins.SystemExit"), (interrupt, "builtins.KeyboardInterrupt")):
        job = FutureJob.objects.get(entity_key=str(thing.pk))
        assert (job.state, job.reserved_by, job.run_count, job.failure_count) == (State.SCHEDULED, "", 1, 1)
        assert job.recent_errors[-1]["exception_class_path"] == path
    exit2_error = FutureJob.objects.get(entity_key=str(exit2.pk)).last_error
    assert exit2_error.startswith("SystemExit: 2 (raised by fault.poison")
    assert "raise SystemExit(2)" in err  # its traceback, logged


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_operators_signal_to_a_tick__hands_back_the_run_and_its_batch_uncharged(signum):
    [long] = seed(1, "fault.long", name="20")
    seed(5, "fault.slow", name="0", due_in=-timedelta(minutes=30))  # due after the long one, claimed with it
    tick = start_tick("--batch-size", "100")
    wait_until(lambda: RunLog.objects.filter(check_name="fault.slow").exists(), 30, what="the long run to start")
    tick.send_signal(signum)
    out, err = tick.communicate(timeout=15)
    assert tick.returncode == 128 + signum, out + err
    assert f"(stopped by {signal.Signals(signum).name}: what had not run was handed back)" in out
    assert not JobHistory.objects.exists()
    for job in FutureJob.objects.all():
        assert (job.state, job.reserved_by, job.run_count, job.failure_count) == (State.SCHEDULED, "", 0, 0), job
    assert RunLog.objects.filter(check_name="fault.slow").count() == 1  # only the long one started
    assert FutureJob.objects.filter(entity_key=str(long.pk)).exists()
