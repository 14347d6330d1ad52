"""The sleep form (#35 item 5): a date-time picker prefilled with the job's next check in the
site's time zone, the zone named beside it, a neutral button (not a deletion's red), and a message
that names the new time; the text formats typed before the picker are still read."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.messages import get_messages
from django.test import override_settings
from django.utils import timezone

from prescient.models import FutureJob
from prescient.states import State

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/prescient/futurejob/"


def ask(client, *jobs: FutureJob) -> str:
    """The sleep action's form for ``jobs``, as the list's action menu opens it."""
    response = client.post(CHANGELIST, {"action": "sleep_jobs", "index": "0",
                                        "_selected_action": [str(job.pk) for job in jobs]})
    assert response.status_code == 200
    return response.content.decode()


def sleep(client, at: str, *jobs: FutureJob) -> list[str]:
    response = client.post(CHANGELIST, {"action": "sleep_jobs", "post": "yes", "at": at,
                                        "_selected_action": [str(job.pk) for job in jobs]}, follow=True)
    return [str(m) for m in get_messages(response.wsgi_request)]


def picker(content: str) -> str:
    found = re.search(r'<input type="datetime-local" name="at"[^>]*>', content)
    assert found, "no date-time picker"
    return found.group(0)


@override_settings(TIME_ZONE="Europe/Paris")
def test_the_picker__prefilled_with_the_next_check_in_the_sites_zone_named_beside_it(admin_client, make_job):
    job = make_job(next_check_at=datetime(2026, 11, 28, 13, 0, tzinfo=UTC))
    content = ask(admin_client, job)
    field = picker(content)
    assert 'value="2026-11-28T14:00"' in field  # 13:00 UTC is 14:00 in Paris
    assert re.search(r'<input type="datetime-local"[^>]*> <span class="prescient-zone">Europe/Paris</span>', content)
    assert "In the time zone named beside it; rounded up to a slot." in content


def test_of_several_jobs__the_earliest_next_check(admin_client, make_job):
    later = make_job(next_check_at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    earlier = make_job(next_check_at=datetime(2026, 11, 30, 8, 30, tzinfo=UTC))
    assert 'value="2026-11-30T08:30"' in picker(ask(admin_client, later, earlier))


def test_the_button__neutral_not_a_deletions_red(admin_client, make_job):
    job = make_job()
    content = ask(admin_client, job)
    assert re.search(r'<body class="[^"]*prescient-sleep-confirmation', content)
    style = re.search(r"<style[^>]*>(.*?)</style>", content.split("<body", 1)[0], re.S)
    assert style, "no style of the sleep page"
    neutral = r'body\.prescient-sleep-confirmation form input\[type="submit"\] \{ background: var\(--button-bg'
    assert re.search(neutral, style.group(1))
    kill = admin_client.post(
        CHANGELIST, {"action": "kill_jobs", "index": "0", "_selected_action": [str(job.pk)]}
    ).content.decode()
    assert "--button-bg" not in kill  # a kill keeps the red button of a deletion


@override_settings(TIME_ZONE="Europe/Paris")
def test_the_message_names_the_new_time_and_its_zone(admin_client, make_job):
    job = make_job()
    day = (timezone.localtime() + timedelta(days=3)).date()
    messages = sleep(admin_client, f"{day.isoformat()}T14:00", job)
    assert messages == [f"1 job sleeps until {day.day} {day:%b %Y} 14:00 (Europe/Paris)."]
    job.refresh_from_db()
    assert timezone.localtime(job.next_check_at).strftime("%Y-%m-%d %H:%M") == f"{day.isoformat()} 14:00"


def test_the_old_text_formats__still_read_and_the_message_names_the_slot(admin_client, make_job):
    job, running = make_job(), make_job(state=State.RUNNING, reserved_by="tick:1:abc", reserved_at=timezone.now())
    day = (timezone.now() + timedelta(days=2)).date()
    messages = sleep(admin_client, f"{day.isoformat()} 09:07", job, running)  # as typed before the picker
    named = f"{day.day} {day:%b %Y} 09:15 (UTC)"  # rounded up to a 15-minute slot
    assert messages == [
        f"1 job sleeps until {named}.",
        f"1 job is running: it is asked to stop, and sleeps until {named} once its run returns.",
    ]
    assert FutureJob.objects.get(pk=job.pk).next_check_at == datetime(day.year, day.month, day.day, 9, 15, tzinfo=UTC)
    for typed in (f"{day:%m/%d/%Y} 10:00", f"{day.isoformat()} 10:00:00"):
        assert sleep(admin_client, typed, job) == [f"1 job sleeps until {day.day} {day:%b %Y} 10:00 (UTC)."]


def test_not_a_time__the_form_again_with_the_error(admin_client, make_job):
    job = make_job()
    response = admin_client.post(CHANGELIST, {"action": "sleep_jobs", "post": "yes", "at": "next tuesday",
                                              "_selected_action": [str(job.pk)]})
    assert response.status_code == 200 and response.context["form"].errors["at"]
    assert 'type="datetime-local"' in response.content.decode()
