"""How an expectation is worded (issue #34, item 6): rungs in the site's time zone as every other
time, not ISO UTC with microseconds; no check counters on expectation jobs (their ladder is their
bound); plurals; ladder offsets as ``10m``/``3h``/``1d`` in ``prescient_status``; the API's job and
history entries carry their kind and an expectation's rungs, step and ``met_at``."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

import prescient
from prescient.kinds.expectations import ladder_text
from prescient.models import FutureJob, JobHistory
from prescient.wording import counted, offset_text
from tests.api.test_views import Api, make_token, make_user
from tests.conftest import T0

pytestmark = pytest.mark.django_db
#: A save's expectations are judged when its transaction commits: these tests commit for real.
COMMITS = pytest.mark.django_db(transaction=True)

H = timedelta(hours=1)


@pytest.mark.parametrize(
    ("offset", "text"),
    [
        (timedelta(minutes=10), "10m"), (3 * H, "3h"), (timedelta(days=1), "1d"), (timedelta(minutes=90), "1h30m"),
        (timedelta(seconds=45), "45s"), (timedelta(0), "0s"), (timedelta(days=2, hours=3), "2d3h"), (600.0, "10m"),
    ],
)
def test_offset_text(offset, text):
    assert offset_text(offset) == text


def test_counted():
    assert (counted(1, "rung"), counted(3, "rung"), counted(0, "rung")) == ("1 rung", "3 rungs", "0 rungs")


@override_settings(TIME_ZONE="Europe/Berlin", USE_TZ=True)
def test_the_next_rung__in_the_sites_time_zone_as_the_admin_shows_times(declare, make_thing):
    declare()
    job = prescient.expect(make_thing(), "test.expect", now=T0.replace(microsecond=504262))
    assert job is not None
    text = ladder_text(job)
    assert "+00:00" not in text and "504262" not in text, text
    assert text.startswith("rung 0 of 3 reached; next ")
    # T0 is 10:00 UTC, rung 1 three hours later: 14:00 in Berlin (CET), as Django formats it.
    assert "2 p.m." in text or "14:00" in text, text


@COMMITS
def test_a_met_row__names_its_time_localized_and_the_rungs_in_the_right_number(declare, make_thing):
    declare("test.one", ladder=[H])
    thing = make_thing()
    prescient.expect(thing, "test.one", now=T0)
    thing.status = "shipped"
    thing.save()
    row = JobHistory.objects.get(job_exec="test.one")
    text = ladder_text(row)
    assert text.startswith("met at ") and text.endswith("after 0 of 1 rung"), text
    assert "T" not in text.split(",")[0].removeprefix("met at "), text  # not an ISO string


def test_the_admin_job_list__shows_the_rung_not_check_counters_for_an_expectation(admin_client, declare, make_thing):
    declare()
    prescient.expect(make_thing(), "test.expect", now=T0)
    content = admin_client.get("/admin/prescient/futurejob/").content.decode()
    assert "rung 0 of 3" in content
    assert "0 / " not in content
    job = FutureJob.objects.get()
    page = admin_client.get(f"/admin/prescient/futurejob/{job.pk}/change/").content.decode()
    assert "rung 0 of 3" in page and "0 / " not in page


def test_prescient_status__words_the_ladder_as_offsets(declare):
    declare("test.words", ladder=[timedelta(minutes=10), 3 * H, timedelta(days=1)])
    out = StringIO()
    call_command("prescient_status", stdout=out)
    assert "test.words  model=testapp.thing ladder=[10m, 3h, 1d]" in out.getvalue()


@COMMITS
def test_the_api__carries_kind_rungs_step_and_met_at(declare, make_thing):
    declare()
    waiting, met = make_thing(), make_thing()
    prescient.expect(waiting, "test.expect", now=T0)
    prescient.expect(met, "test.expect", now=T0)
    met.status = "shipped"
    met.save()
    api = Api(make_token(make_user()))
    [job] = api.get("tasks").json()["items"]
    assert job["kind"] == "expectation"
    assert job["ladder"]["step"] == 0 and len(job["ladder"]["rungs"]) == 3 and job["ladder"]["met_at"] is None
    [row] = api.get("history").json()["items"]
    assert row["kind"] == "expectation" and row["ladder"]["met_at"]
    prescient.schedule(make_thing(), "test.record", now=T0)
    checks = [item for item in api.get("tasks").json()["items"] if item["kind"] == "check"]
    assert checks and checks[0]["ladder"] is None


def test_logs__name_an_expectation_an_expectation_not_a_check(declare, make_thing, caplog):
    def broken(thing, job, step):
        raise ConnectionError("the mail server is down")

    declare(handler=broken)
    thing = make_thing()
    prescient.expect(thing, "test.expect", now=T0)
    with caplog.at_level("INFO", logger="prescient"):
        prescient.tick(T0 + 3 * H)
    lines = [r.getMessage() for r in caplog.records]
    settled = [line for line in lines if "outcome=retried" in line]
    assert settled and settled[0].startswith("expectation=test.expect entity=testapp.thing:")
    assert any(line.startswith("expectation test.expect[") and " raised" in line for line in lines)
    assert not [line for line in lines if line.startswith("check")]


def test_the_job_page__says_expectation_where_it_said_check(declare, make_thing, admin_client):
    declare()
    thing = make_thing()
    job = prescient.expect(thing, "test.expect", now=T0)
    assert job is not None
    page = admin_client.get(f"/admin/prescient/futurejob/{job.pk}/change/").content.decode()
    assert "No earlier jobs of this expectation for this entity." in page
