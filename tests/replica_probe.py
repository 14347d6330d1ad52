"""A process of tests/test_replica.py, run with ``DATABASE_URL`` (the primary) and
``PRESCIENT_TEST_REPLICA_URL`` (its streaming replica, READ_DATABASE): ``python -m
tests.replica_probe <what>`` prints one JSON object.

- ``schedule``: a new job of ``test.record`` (on the primary); ``{"id": …}``.
- ``pages``: what the admin's job list and dashboard, the API's job list and prescient_status
  show (as the Django test client sees them): the job ids, whether they say "as of".
- ``act <id>``: pause the job by an admin action (a POST to the job list), release it by an
  API POST, then run it with a tick: each writes or claims on the primary.
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import timedelta
from io import StringIO
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from prescient.checks import get_check  # noqa: E402
from prescient.engine import verbs  # noqa: E402
from prescient.models import FutureJob, JobHistory  # noqa: E402
from tests.testapp.models import Thing  # noqa: E402


def client() -> Client:
    user, _ = get_user_model().objects.get_or_create(
        username="replica-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    browser = Client()
    browser.force_login(user)
    return browser


def pages() -> dict[str, Any]:
    browser = client()
    listed = browser.get("/admin/prescient/futurejob/")
    dashboard = browser.get("/admin/prescient/futurejob/dashboard/")
    api = browser.get("/prescient/jobs")
    out = StringIO()
    call_command("prescient_status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    return {
        "list_ids": sorted({int(n) for n in re.findall(r"/admin/prescient/futurejob/(\d+)/change/", listed.text)}),
        "list_as_of": "As of" in listed.text,
        "dashboard_total": dashboard.context["total"],
        "dashboard_as_of": "As of" in dashboard.text,
        "api_ids": sorted(item["id"] for item in api.json()["items"]),
        "api_as_of": api.get("Prescient-As-Of"),
        "status_scheduled": status["states"]["scheduled"],
        "status_as_of": status["as_of"],
    }


def act(pk: int) -> dict[str, Any]:
    browser = client()
    posted = browser.post("/admin/prescient/futurejob/", {"action": "pause_jobs", "_selected_action": [pk]})
    paused = FutureJob.objects.using("default").get(pk=pk).state
    released = browser.post(f"/prescient/jobs/{pk}/release")
    state = FutureJob.objects.using("default").get(pk=pk).state
    call_command("prescient_tick", "--now", (timezone.now() + timedelta(days=1)).isoformat(), stdout=StringIO())
    return {
        "action_status": posted.status_code, "paused": paused,
        "release_status": released.status_code, "released": state,
        "ran": JobHistory.objects.using("default").filter(job_id=pk).values_list("outcome", flat=True).first(),
    }


def main(argv: list[str]) -> None:
    setup_test_environment()  # the test client records each page's context
    if argv[0] == "schedule":
        thing = Thing.objects.create(name="replica")
        job, _created = verbs.schedule_job(thing, get_check("test.record"), delay=timedelta(hours=1))
        result: dict[str, Any] = {"id": job.pk}
    elif argv[0] == "pages":
        result = pages()
    else:
        result = act(int(argv[1]))
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
