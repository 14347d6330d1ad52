"""Running finished jobs again from the admin, and cancelling live ones (issue #35 item 1): the
history row's *Run again* button (two clicks from the list to a new live job), the history
list's action, the links both ways, refusals and permissions; the job page's *Cancel*."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

import prescient
from prescient.models import FutureJob, JobHistory
from tests.admin.test_jobs_and_history import act, change_url, texts, viewer  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

HISTORY = "/admin/prescient/jobhistory/"


@pytest.fixture
def failed(register, make_thing, t0) -> JobHistory:
    def broken(thing, job):
        raise RuntimeError("boom")

    register("test.broken", broken, max_retries=0)
    job = prescient.schedule(make_thing(), "test.broken", at=t0, now=t0)
    prescient.tick(t0 + timedelta(minutes=1))
    return JobHistory.objects.get(job_id=job.pk, outcome="failed")


def rerun_url(row: JobHistory) -> str:
    return f"{HISTORY}{row.pk}/rerun/"


def test_run_again__two_clicks_from_the_list_to_a_new_live_job_linked_both_ways(admin_client, failed):
    listing = admin_client.get(HISTORY).content.decode()
    assert change_url(failed) in listing  # click 1: the row's page
    page = admin_client.get(change_url(failed)).content.decode()
    assert f'action="{rerun_url(failed)}"' in page and "Run again" in page
    response = admin_client.post(rerun_url(failed))  # click 2: Run again
    job = FutureJob.objects.get()
    assert response.status_code == 302 and response["Location"] == change_url(job)
    assert (job.job_exec, job.entity_key, job.rerun_of, job.state) == (
        "test.broken", failed.entity_key, failed.pk, "scheduled",
    )
    assert f"Created job {job.pk} from finished job {failed.pk}" in texts(response)[0]
    job_page = admin_client.get(change_url(job)).content.decode()
    assert f'href="{change_url(failed)}"' in job_page  # re-run of
    row_page = admin_client.get(change_url(failed)).content.decode()
    assert f'href="{change_url(job)}"' in row_page and f"live job {job.pk}" in row_page  # run again as


def test_run_again__refused_while_a_live_job_exists_says_why_and_writes_nothing(admin_client, failed, t0):
    live = prescient.rerun(failed, now=t0)
    response = admin_client.post(rerun_url(failed))
    assert response["Location"] == change_url(failed)
    assert f"job {live.pk} of this check for this entity is live" in texts(response)[0]
    assert FutureJob.objects.count() == 1


def test_run_again__needs_the_add_permission_and_a_post(viewer, admin_client, failed):  # noqa: F811
    assert 'id="prescient-rerun"' not in viewer.get(change_url(failed)).content.decode()
    assert viewer.post(rerun_url(failed)).status_code == 403
    assert viewer.post(f"{HISTORY}424242/rerun/").status_code == 403  # the same whether or not it exists
    assert admin_client.get(rerun_url(failed)).status_code == 405
    assert admin_client.post(f"{HISTORY}424242/rerun/").status_code == 404
    assert not FutureJob.objects.exists()


def test_run_again__the_list_action_names_what_it_created_and_what_it_refused(admin_client, failed, t0):
    killed_job = prescient.schedule(thing_of(failed), "test.broken", now=t0)
    prescient.kill(killed_job, "to run again", now=t0)
    killed = JobHistory.objects.get(job_id=killed_job.pk)
    response = act(admin_client, "rerun_jobs", failed, killed, url=HISTORY)
    job = FutureJob.objects.get()
    messages = texts(response)
    assert f"Created 1 job: {job.pk}." in messages
    assert any(f"Finished job {killed.pk} cannot be run again: job {job.pk}" in m for m in messages), messages
    assert job.rerun_of == failed.pk  # the oldest row selected first


def thing_of(row: JobHistory):
    from tests.testapp.models import Thing

    return Thing.objects.get(pk=row.entity_key)


def test_cancel__button_and_action_end_the_job_cancelled(admin_client, make_job):
    one, two = make_job(), make_job()
    response = admin_client.post(change_url(one), {"action": "cancel_jobs", "_selected_action": [one.pk]})
    row = JobHistory.objects.get(job_id=one.pk)
    assert response.status_code == 302 and response["Location"] == change_url(row)
    assert row.outcome == "cancelled"
    response = act(admin_client, "cancel_jobs", two)
    assert "Cancelled 1 job." in texts(response)
    assert JobHistory.objects.get(job_id=two.pk).outcome == "cancelled" and not FutureJob.objects.exists()


def test_cancel__needs_the_change_permission(viewer: Client, make_job):  # noqa: F811
    job = make_job()
    viewer.post(change_url(job), {"action": "cancel_jobs", "_selected_action": [job.pk]})
    assert FutureJob.objects.filter(pk=job.pk).exists()
