"""``prescient_retry`` (issue #35 item 1): finished jobs selected in the history run again, with
--dry-run and --json, a refusal naming why."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

import prescient
from prescient.models import FutureJob, JobHistory

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("prescient_retry", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def killed(make_job, t0):
    """Two killed jobs of test.record, on two entities: their history rows, oldest first."""
    rows = []
    for _ in range(2):
        job = make_job("test.record")
        prescient.kill(job, "by mistake", now=t0)
        rows.append(JobHistory.objects.get(job_id=job.pk))
    return rows


def test_retry__by_id_creates_a_live_job_linked_to_the_row(killed):
    out = run("--id", str(killed[0].pk), "--now", "2026-11-22T12:00:00+00:00")
    job = FutureJob.objects.get()
    assert f"run again as job {job.pk}" in out and "Created 1 job(s); 0 refused; 1 selected." in out
    assert (job.rerun_of, job.entity_key) == (killed[0].pk, killed[0].entity_key)


def test_retry__dry_run_creates_nothing_and_json_says_each_row(killed):
    data = json.loads(run("--check", "test.record", "--outcome", "killed", "--dry-run", "--json"))
    assert not FutureJob.objects.exists()
    assert data["verb"] == "rerun" and data["dry_run"] is True
    newest_first = [(killed[1].pk, "would create"), (killed[0].pk, "would create")]
    assert [(r["id"], r["result"]) for r in data["rows"]] == newest_first
    data = json.loads(run("--check", "test.record", "--json"))
    assert data["summary"] == {"created": 2}
    assert {r["job"]: r["id"] for r in data["rows"]} == dict(FutureJob.objects.values_list("pk", "rerun_of"))


def test_retry__a_refusal_says_why(killed):
    live = prescient.rerun(killed[0])
    data = json.loads(run("--outcome", "killed", "--json"))
    refused = [r for r in data["rows"] if r["result"] == "refused"]
    assert [r["id"] for r in refused] == [killed[0].pk]
    assert f"job {live.pk} of this check for this entity is live" in refused[0]["detail"]
    assert data["summary"] == {"created": 1, "refused": 1}
    with pytest.raises(CommandError, match="cannot be run again"):
        run("--id", str(killed[0].pk))  # one row asked for: its refusal is the command's


def test_retry__needs_a_selection_and_known_ids(killed):
    with pytest.raises(CommandError, match="select finished jobs"):
        run()
    with pytest.raises(CommandError, match="No finished job .* 424242"):
        run("--id", "424242")
