"""A job's own page (#27 item 5): a button per verb, each posting the job list's action for
this one job, with the list's confirmations and permissions (tests/admin/test_console_layout.py
clicks them in a browser)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from prescient.models import FutureJob, JobHistory
from prescient.states import State
from tests.admin.test_jobs_and_history import change_url, jobs, texts, viewer  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def buttons(content: bytes) -> list[str]:
    page = content.decode()
    if 'id="prescient-job-verbs"' not in page:
        return []
    form = page[page.index('id="prescient-job-verbs"'):]
    form = form[: form.index("</form>")]
    return [part.split('"', 1)[0] for part in form.split('name="action" value="')[1:]]


def test_buttons__by_the_jobs_state(admin_client, jobs):  # noqa: F811
    assert buttons(admin_client.get(change_url(jobs["scheduled"])).content) == [
        "pause_jobs", "run_jobs_now", "sleep_jobs", "cancel_jobs", "kill_jobs",
    ]
    assert buttons(admin_client.get(change_url(jobs["paused"])).content) == [
        "release_jobs", "run_jobs_now", "sleep_jobs", "cancel_jobs", "kill_jobs",
    ]


def test_buttons__none_for_a_user_who_may_only_view(viewer, jobs):  # noqa: F811
    assert buttons(viewer.get(change_url(jobs["scheduled"])).content) == []
    viewer.post(change_url(jobs["scheduled"]), {"action": "kill_jobs", "post": "yes", "reason": "x"})
    viewer.post(change_url(jobs["scheduled"]), {"action": "pause_jobs"})
    assert FutureJob.objects.get(pk=jobs["scheduled"].pk).state == State.SCHEDULED


def test_pause__acts_on_this_job_alone_and_comes_back_to_its_page(admin_client, jobs):  # noqa: F811
    job, other = jobs["scheduled"], jobs["buried"]
    # Even with another id slipped in, only the page's job is acted on.
    response = admin_client.post(change_url(job), {"action": "pause_jobs", "_selected_action": [other.pk]})
    assert response.status_code == 302 and response["Location"] == change_url(job)
    assert FutureJob.objects.get(pk=job.pk).state == State.PAUSED
    assert FutureJob.objects.get(pk=other.pk).state == State.BURIED


def test_kill__asks_for_a_reason_then_lands_on_the_finished_row(admin_client, jobs):  # noqa: F811
    job = jobs["scheduled"]
    confirm = admin_client.post(change_url(job), {"action": "kill_jobs"})
    assert confirm.status_code == 200 and b"prescient-kill-confirmation" in confirm.content
    assert FutureJob.objects.filter(pk=job.pk).exists()  # nothing yet
    response = admin_client.post(change_url(job), {"action": "kill_jobs", "post": "yes", "reason": "duplicate"},
                                 follow=True)
    row = JobHistory.objects.get(job_id=job.pk)
    assert response.redirect_chain[-1][0] == change_url(row)
    assert "Killed 1 job." in texts(response)
    assert row.reason == "duplicate"


def test_a_refusal__is_the_lists_warning(admin_client, jobs):  # noqa: F811
    response = admin_client.post(change_url(jobs["buried"]), {"action": "pause_jobs"}, follow=True)
    assert any(text.startswith("Skipped job") for text in texts(response))
    assert FutureJob.objects.get(pk=jobs["buried"].pk).state == State.BURIED


def test_a_post_without_an_action__is_still_refused(admin_client, jobs):  # noqa: F811
    assert admin_client.post(change_url(jobs["scheduled"]), {"state": State.BURIED}).status_code == 403


@pytest.fixture
def stranger(db) -> Client:
    """A staff user without any of prescient's permissions."""
    user = User.objects.create_user("stranger", password="not-used", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def test_a_posted_action__is_the_same_403_whether_or_not_the_job_exists(stranger, viewer, jobs):  # noqa: F811
    job = jobs["scheduled"]
    missing = FutureJob.objects.order_by("-pk").first().pk + 1000  # type: ignore[union-attr]
    for client in (stranger, viewer):
        for pk in (job.pk, missing):
            response = client.post(f"/admin/prescient/futurejob/{pk}/change/", {"action": "pause_jobs"})
            assert response.status_code == 403, (client, pk)
            assert "Location" not in response
    # The page itself answers the stranger the same way.
    assert stranger.get(change_url(job)).status_code == 403
    assert FutureJob.objects.get(pk=job.pk).state == State.SCHEDULED
