"""Metrics a dashboard can follow (#35 item 8): worker labels that stay the same across
restarts (host and a given name, never a pid), every counter exported at 0 from the start,
and no gauge that repeats a counter."""

from __future__ import annotations

import os
import re
import socket
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from prescient.api.metrics import LABEL_VALUES, exposition
from prescient.models import Worker
from prescient.models.workers import given_name, unique_name
from prescient.runtime.worker import WorkerProcess
from prescient.states import Outcome
from tests.api.test_metric_tallies import by_labels
from tests.api.test_metrics import samples

pytestmark = pytest.mark.django_db


def worker(name, host, heartbeat_at, skew=0.0, stopped_at=None):
    return Worker.objects.create(
        name=name, hostname=host, pid=int(name.split(":")[1]), started_at=heartbeat_at, heartbeat_at=heartbeat_at,
        clock_skew_seconds=skew, stopped_at=stopped_at,
    )


def skews(t0):
    got = samples(exposition(t0)[0])
    return {tuple(sorted(dict(labels).items())): v for labels, v in
            by_labels(got, "prescient_worker_clock_skew_seconds").items()}


# --- worker labels ----------------------------------------------------------------------------------


def test_worker_name__is_the_given_name_then_pid_and_a_random_part():
    process = WorkerProcess(name="web-a")
    assert process.given_name == "web-a"
    assert re.fullmatch(rf"web-a:{os.getpid()}:[0-9a-f]{{8}}", process.name)
    assert WorkerProcess(name="web-a").name != process.name  # unique to each start: its claims' token
    assert given_name(process.name) == "web-a"
    assert WorkerProcess().given_name == socket.gethostname()[:16]  # by default, the host's name


@pytest.mark.parametrize("bad", ["web:a", "a/b", "x" * 17, "-web", " web"])
def test_worker_name__refuses_what_its_claims_could_not_carry(bad):
    with pytest.raises(ValueError, match="a worker's name is 1 to 16"):
        WorkerProcess(name=bad)
    with pytest.raises(CommandError, match="is not a worker name"):
        call_command("prescient_worker", "--once", f"--name={bad}")


def test_clock_skew__keeps_its_labels_across_a_restart(t0):
    before = worker(unique_name("web-a", 100, "aaaaaaaa"), "vm", t0 - timedelta(minutes=1), skew=0.5)
    assert skews(t0) == {(("host", "vm"), ("worker", "web-a")): 0.5}
    Worker.objects.filter(pk=before.pk).update(stopped_at=t0)  # restarted: a new pid, a new random part
    worker(unique_name("web-a", 200, "bbbbbbbb"), "vm", t0, skew=0.75)
    assert skews(t0) == {(("host", "vm"), ("worker", "web-a")): 0.75}


def test_clock_skew__workers_sharing_host_and_name_are_one_series(t0):
    worker(unique_name("vm", 1, "aaaaaaaa"), "vm", t0, skew=-2.0)
    worker(unique_name("vm", 2, "bbbbbbbb"), "vm", t0, skew=1.0)
    worker(unique_name("mail", 3, "cccccccc"), "vm", t0, skew=1.0)
    worker(unique_name("vm", 4, "dddddddd"), "vm2", t0, skew=0.0)
    assert skews(t0) == {
        (("host", "vm"), ("worker", "mail")): 1.0,
        (("host", "vm"), ("worker", "vm")): -2.0,  # one clock: the skew of largest size
        (("host", "vm2"), ("worker", "vm")): 0.0,
    }


# --- counters at 0 from the start -------------------------------------------------------------------


def test_counters__every_registered_check_has_every_counter_at_0_before_any_event(register, t0):
    register("test.quiet", lambda thing, job: None)
    got = samples(exposition(t0)[0])
    check = (("check", "test.quiet"), ("queue", ""))
    assert got[("prescient_retries_total", check)] == 0
    for metric, prefix, label in [
        ("prescient_runs_total", "runs", "result"),
        ("prescient_job_outcomes_total", "outcomes", "outcome"),
        ("prescient_rescues_total", "rescues", "action"),
    ]:
        found = {dict(labels)[label]: v for labels, v in by_labels(got, metric).items()
                 if dict(labels)["check"] == "test.quiet"}
        assert found == dict.fromkeys(LABEL_VALUES[prefix], 0.0), metric
    assert set(LABEL_VALUES["rescues"]) == {"reclaimed", "handed_back", "buried", "slept", "ended", "failed"}
    assert set(LABEL_VALUES["outcomes"]) == set(Outcome.values)
    for histogram in ("prescient_run_duration_seconds", "prescient_start_lag_seconds"):
        assert got[(f"{histogram}_count", check)] == 0 and got[(f"{histogram}_sum", check)] == 0


def test_no_gauge_repeats_a_counter(t0):
    names = {name for name, _labels in samples(exposition(t0)[0])}
    assert "prescient_finished_jobs" not in names
    assert "prescient_job_outcomes_total" in names  # what ended, counted for good
