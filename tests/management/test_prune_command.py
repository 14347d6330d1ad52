"""prescient_prune: the history past its retention, removed (or counted) per outcome."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from prescient.models import JobHistory
from prescient.states import Outcome
from tests.conftest import T0

pytestmark = pytest.mark.django_db

T0_ISO = "2026-11-22T10:00:00+00:00"
SECOND = timedelta(seconds=1)
RETENTION = {"completed": 7, "failed": None, "*": 30}


def run(*args, verbosity=1):
    out = StringIO()
    call_command("prescient_prune", *args, stdout=out, verbosity=verbosity)
    return out.getvalue()


def history(outcome, finished_at, key):
    JobHistory.objects.create(
        job_id=1, entity_name="testapp.thing", entity_key=key, job_exec="test.record", outcome=outcome,
        first_check_at=finished_at, created_at=finished_at, finished_at=finished_at,
    )


@pytest.fixture
def rows(settings, t0):
    """Around each outcome's cut-off: 3 + 2 expired completed, 1 expired of every other pruned
    outcome, failed kept forever; the rows at and after each cut-off stay."""
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": RETENTION}
    for outcome in Outcome.values:
        days = RETENTION.get(outcome, RETENTION["*"])
        cutoff = t0 - timedelta(days=days if days is not None else 10_000)
        history(outcome, cutoff - SECOND, "expired")
        history(outcome, cutoff, "at the cut-off")
        history(outcome, cutoff + SECOND, "kept")
    for i in range(4):
        history("completed", t0 - timedelta(days=8 + i), f"old {i}")
    return t0


def expected_lines(verb, removed):
    lines = []
    for outcome in Outcome.values:
        days = RETENTION.get(outcome, RETENTION["*"])
        if days is None:
            lines.append(f"  {outcome}: kept forever")
            continue
        cutoff = (T0 - timedelta(days=days)).isoformat()
        lines.append(f"  {outcome}: {verb} {removed[outcome]} (kept {days} days: finished before {cutoff})")
    return lines


EXPIRED = {outcome: (5 if outcome == "completed" else 1) for outcome in Outcome.values if outcome != "failed"}


def survivors():
    return sorted(JobHistory.objects.values_list("outcome", "entity_key"))


def test_prune__removes_exactly_the_expired_rows_and_prints_them_per_outcome(rows):
    out = run("--now", T0_ISO, "--batch-size", "2")
    total = sum(EXPIRED.values())
    assert out.splitlines() == [*expected_lines("removed", EXPIRED), f"prescient prune: removed {total} history row(s)"]
    kept = [(o, k) for o in Outcome.values for k in ("at the cut-off", "kept")] + [("failed", "expired")]
    assert survivors() == sorted(kept)
    assert run("--now", T0_ISO).splitlines()[-1] == "prescient prune: removed 0 history row(s)"


def test_prune__dry_run_removes_nothing_and_reports_the_same_counts(rows):
    before = survivors()
    out = run("--now", T0_ISO, "--dry-run")
    total = sum(EXPIRED.values())
    assert out.splitlines() == [
        *expected_lines("would remove", EXPIRED), f"prescient prune (dry run): would remove {total} history row(s)"
    ]
    assert survivors() == before
    assert run("--now", T0_ISO).splitlines()[-1] == f"prescient prune: removed {total} history row(s)"


def test_prune__verbosity_0_prints_nothing_and_still_prunes(rows):
    assert run("--now", T0_ISO, verbosity=0) == ""
    assert JobHistory.objects.filter(entity_key="expired").exclude(outcome="failed").count() == 0


def test_prune__retention_none_keeps_everything(settings, t0):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": None}
    history("completed", t0 - timedelta(days=10_000), "ancient")
    out = run("--now", T0_ISO)
    assert out.splitlines() == [
        *(f"  {outcome}: kept forever" for outcome in Outcome.values), "prescient prune: removed 0 history row(s)"
    ]
    assert JobHistory.objects.count() == 1


def test_prune__the_default_now_is_the_database_clock(settings):
    from prescient.clock import db_now

    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"*": 1}}
    now = db_now()
    history("completed", now - timedelta(days=1, minutes=5), "expired")
    history("completed", now - timedelta(days=1) + timedelta(minutes=5), "kept")
    assert run().splitlines()[-1] == "prescient prune: removed 1 history row(s)"
    assert survivors() == [("completed", "kept")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--now", "yesterday"], "'yesterday' is not an ISO 8601 date-time"),
        (["--now", "2026-11-22T10:00:00"], "'2026-11-22T10:00:00' has no UTC offset"),
        (["--batch-size", "0"], "must be a whole number from 1 to 100,000; got '0'"),
        (["--batch-size", "many"], "must be a whole number from 1 to 100,000; got 'many'"),
    ],
)
def test_prune__bad_arguments_are_command_errors_and_remove_nothing(rows, args, message):
    before = survivors()
    with pytest.raises(CommandError, match=re.escape(message)):
        run(*args)
    assert survivors() == before


def test_prune__a_bad_setting_stops_it_with_the_system_check_and_removes_nothing(rows, settings):
    settings.PRESCIENT = {"HISTORY_RETENTION_DAYS": {"complete": 7, "*": 30}}
    before = survivors()
    with pytest.raises(CommandError, match=re.escape("names an unknown outcome 'complete'")):
        call_command("prescient_prune", "--now", T0_ISO, skip_checks=False, stdout=StringIO())
    assert survivors() == before
