"""The counters and histograms per check and queue (#27 item 6): running totals written in the
transaction that settles each run (prescient.tallies), summed by each scrape, so that they
survive the processes that counted."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

import prescient
from prescient.api.metrics import exposition, read_tallies
from prescient.clock import db_now
from prescient.engine.store.tallies import add
from prescient.maintenance.rescuer import Rescuer
from prescient.models import MetricTally
from prescient.states import State
from prescient.tallies import SHARDS, bucket
from tests.api.test_metrics import samples

pytestmark = pytest.mark.django_db


def by_labels(got, name):
    return {labels: value for (metric, labels), value in got.items() if metric == name}


def counted(got, name):
    """The samples of ``name`` above 0 (every counter is exported at 0 from the start)."""
    return {labels: value for labels, value in by_labels(got, name).items() if value}


def test_bucket__is_named_by_its_upper_bound():
    assert [bucket(v, (1.0, 2.5)) for v in (0.0, 1.0, 1.5, 2.5, 3.0)] == ["1", "1", "2.5", "2.5", "inf"]


def test_runs_outcomes_and_retries__counted_per_check_as_runs_settle(register, make_thing, t0):
    register("test.done", lambda thing, job: None)
    register("test.again", lambda thing, job: timedelta(hours=2))

    def boom(thing, job):
        raise RuntimeError("boom")

    register("test.boom", boom, max_retries=1)
    for check in ("test.done", "test.again", "test.boom"):
        prescient.schedule(make_thing(), check, now=t0)
    prescient.tick(t0 + timedelta(hours=1))
    prescient.tick(t0 + timedelta(days=1))  # the retry of test.boom, the re-check of test.again
    got = samples(exposition(t0 + timedelta(days=1))[0])

    runs = by_labels(got, "prescient_runs_total")
    assert runs[(("check", "test.done"), ("queue", ""), ("result", "completed"))] == 1
    assert runs[(("check", "test.again"), ("queue", ""), ("result", "rescheduled"))] == 2
    assert runs[(("check", "test.boom"), ("queue", ""), ("result", "retried"))] == 1
    assert runs[(("check", "test.boom"), ("queue", ""), ("result", "failed"))] == 1
    outcomes = counted(got, "prescient_job_outcomes_total")
    assert outcomes == {
        (("check", "test.boom"), ("outcome", "failed"), ("queue", "")): 1,
        (("check", "test.done"), ("outcome", "completed"), ("queue", "")): 1,
    }
    assert counted(got, "prescient_retries_total") == {(("check", "test.boom"), ("queue", "")): 1}
    durations = by_labels(got, "prescient_run_duration_seconds_count")
    assert durations[(("check", "test.again"), ("queue", ""))] == 2
    assert sum(durations.values()) == 5  # every run, whatever it led to


def test_start_lag__from_the_due_time_to_the_start(make_job):
    # The start is the database's stamp of the run (run_started_at): due times by its clock too.
    now = db_now()
    make_job("test.record", next_check_at=now - timedelta(minutes=10))  # ten minutes late
    prescient.tick(now)
    got = samples(exposition(now)[0])
    labels = (("check", "test.record"), ("queue", ""))
    assert 600 <= got[("prescient_start_lag_seconds_sum", labels)] <= 660
    lag = {dict(k)["le"]: v for k, v in by_labels(got, "prescient_start_lag_seconds_bucket").items()
           if dict(k)["check"] == "test.record"}
    assert (lag["300"], lag["900"], lag["+Inf"]) == (0, 1, 1)  # cumulative, as Prometheus reads them
    assert got[("prescient_start_lag_seconds_count", labels)] == 1


def test_killed_and_cancelled_jobs__count_as_outcomes(make_job, t0):
    job = make_job("test.record", next_check_at=t0)
    prescient.kill(job, "by hand")
    got = samples(exposition(t0)[0])
    assert got[("prescient_job_outcomes_total", (("check", "test.record"), ("outcome", "killed"), ("queue", "")))] == 1
    assert not counted(got, "prescient_runs_total")  # no run: nothing ran


def test_rescues__counted_per_action(make_job, make_thing, t0):
    stale = db_now() - timedelta(seconds=200)
    make_job(thing=make_thing(), state=State.RUNNING, reserved_by="tick:1:abc", reserved_at=stale,
             run_started_at=stale)
    make_job(thing=make_thing(), state=State.RESERVED, reserved_by="worker:h:1/1", reserved_at=stale)
    assert Rescuer().run_once(t0) == 2
    rescues = counted(samples(exposition(t0)[0]), "prescient_rescues_total")
    assert {dict(k)["action"]: v for k, v in rescues.items()} == {"buried": 1, "handed_back": 1}


def test_totals__survive_the_process_and_add_up_over_shards(t0):
    # Other processes (other pids: other shards) added to the same figure.
    for shard in range(SHARDS):
        MetricTally.objects.create(job_exec="test.record", queue="mail", name="runs:completed", shard=shard, value=2)
    add(Counter({("test.record", "mail", "runs:completed"): 3}))
    add(Counter({("test.record", "mail", "runs:completed"): 1}))
    totals = read_tallies()
    assert totals.pop(("test.record", "mail")) == {"runs:completed": 2 * SHARDS + 4}
    assert not any(totals.values())  # the registered checks, no totals yet
    got = samples(exposition(t0)[0])
    assert got[("prescient_runs_total", (("check", "test.record"), ("queue", "mail"), ("result", "completed")))] == (
        2 * SHARDS + 4
    )


def test_scrape_cost__one_query_for_every_total_however_many_checks(t0):
    """The tallies are a small table (checks by queues by figures by shards): one grouped read."""
    rows = [
        MetricTally(job_exec=f"check.{n}", queue=queue, name=name, shard=shard, value=1)
        for n in range(100)
        for queue in ("", "mail")
        for name in ("runs:completed", "runs:rescheduled", "duration_le:0.1", "duration_sum", "lag_le:1", "lag_sum")
        for shard in range(SHARDS)
    ]
    MetricTally.objects.bulk_create(rows)  # 9,600 rows: a busy installation's
    with CaptureQueriesContext(connection) as captured:
        body, _ = exposition(t0)
    tally_queries = [q for q in captured.captured_queries if "prescient_metrictally" in q["sql"]]
    assert len(tally_queries) == 1
    families = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {"prescient_runs", "prescient_run_duration_seconds", "prescient_start_lag_seconds"} <= families
