"""prescient_tick: --now parsing, the summary line, and bad input that writes nothing."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

import prescient
from prescient.models import FutureJob, JobHistory

pytestmark = pytest.mark.django_db


def test_tick_command__processes_due_jobs_and_prints_a_summary(make_thing, t0, capsys):
    prescient.schedule(make_thing(), "test.record", now=t0)
    prescient.schedule(make_thing(), "test.record", now=t0, delay=timedelta(hours=2))
    call_command("prescient_tick", "--now", t0.isoformat())
    out = capsys.readouterr().out
    assert out.startswith("prescient tick: processed=1 completed=1 ")
    assert JobHistory.objects.count() == 1
    assert FutureJob.objects.count() == 1


def test_tick_command__accepts_z_suffix(make_thing, t0, capsys):
    prescient.schedule(make_thing(), "test.record", now=t0)
    call_command("prescient_tick", "--now", "2026-11-22T10:00:00Z")
    assert "completed=1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yesterday", "not an ISO 8601 date-time"), ("2026-11-22T10:00:00", "has no UTC offset"),
        ("2026-13-01T00:00+00:00", "not an ISO"),
    ],
)
def test_tick_command__bad_now_is_a_clear_error_and_runs_nothing(make_thing, t0, value, message):
    prescient.schedule(make_thing(), "test.record", now=t0)
    with pytest.raises(CommandError, match=message):
        call_command("prescient_tick", "--now", value)
    assert FutureJob.objects.get().state == "scheduled"
    assert not JobHistory.objects.exists()


def test_tick_command__bad_batch_size(t0):
    with pytest.raises(CommandError, match="must be a whole number from 1 to 10,000; got '0'"):
        call_command("prescient_tick", "--batch-size", "0")
