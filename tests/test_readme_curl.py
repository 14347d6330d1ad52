"""The README's curl session, run as written against a live server.

The shell block of the README's tour is taken from README.md and run by bash with the real
``curl``; only its ``BASE=`` and ``TOKEN=`` lines are replaced (the live server, a token of a
superuser for all checks), and the demo's model and order (``shop.order``, key ``4``) by the
test app's (``testapp.thing`` and a fresh row's key): the demo app is not installed here. The
check keeps its name, ``shop.unshipped``. A ``curl`` shell function records each request's
method, URL, status and body, so every step's answer is asserted.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

import prescient
from prescient.api import tokens
from prescient.models import FutureJob, JobHistory
from tests.testapp.models import Thing

ROOT = Path(__file__).resolve().parent.parent

#: Records each request (status, method, URL, then the body in base64) and passes the body on.
RECORDING_CURL = r"""
set -eo pipefail
curl() {
  local out last body
  out=$(command curl -sS -w '\n%{http_code} %{method} %{url_effective}' "$@")
  last=${out##*$'\n'}
  body=${out%$'\n'*}
  printf '%s %s\n' "$last" "$(printf '%s' "$body" | base64 -w0)" >> "$CURL_LOG"
  printf '%s\n' "$body"
}
"""


def readme_session() -> str:
    """The README's shell block that talks to ``$BASE/jobs``."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```", readme, re.M | re.S) if "$BASE/jobs" in b]
    assert len(blocks) == 1, "the README has one curl session against $BASE/jobs"
    return blocks[0]


def adapt(session: str, *, base: str, token: str, key: int) -> str:
    """The session with the live server, the token and the test app's model and key."""
    replacements = [
        (r"^BASE=.*$", f"BASE={base}/prescient"),
        (r"^TOKEN=.*$", f"TOKEN={token}"),
        (r"shop\.order", "testapp.thing"),
        (r'"key": "4"', f'"key": "{key}"'),
    ]
    for pattern, new in replacements:
        session, count = re.subn(pattern, new, session, flags=re.M)
        assert count, f"the README's session no longer has {pattern!r}"
    return session


def answers(log: Path) -> list[tuple[str, str, int, Any]]:
    """``(method, path and query, status, JSON body)`` of each request, in order."""
    found = []
    for line in log.read_text().splitlines():
        status, method, url, body = line.split(" ")
        text = base64.b64decode(body).decode()
        found.append((method, re.sub(r"^https?://[^/]+", "", url), int(status), json.loads(text) if text else None))
    return found


def get(url: str, token: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def shell_tools() -> None:
    missing = [tool for tool in ("bash", "curl", "base64", "python3") if shutil.which(tool) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the README's curl session needs {', '.join(missing)}")
        pytest.skip(f"the README's curl session needs {', '.join(missing)}")


def test_readme_curl_session__each_request_answers_as_the_readme_says(
    live_server: Any, shell_tools: None, register: Any, tmp_path: Path
) -> None:
    register("shop.unshipped", lambda thing, job: None if thing.status == "shipped" else timedelta(minutes=2))
    # A job that has ended, as in the demo, so that the session's job is not the first one: a
    # session that names a job by a fixed id instead of the one it created fails.
    earlier = Thing.objects.create(name="order 1")
    prescient.schedule(earlier, "shop.unshipped")
    assert prescient.cancel(earlier, "shop.unshipped")
    thing = Thing.objects.create(name="order 4")
    admin = get_user_model().objects.create_superuser("admin", "admin@example.com", None)
    _row, token = tokens.issue(admin, "curl", all_checks=True, now=timezone.now())
    log = tmp_path / "curl.log"

    result = subprocess.run(
        ["bash", "-c", RECORDING_CURL + adapt(readme_session(), base=live_server.url, token=token, key=thing.pk)],
        env={**os.environ, "CURL_LOG": str(log)}, capture_output=True, text=True, timeout=60, check=False,
    )

    assert result.returncode == 0, result.stderr
    created, one, page, ran = answers(log)
    job = FutureJob.objects.get(entity_name="testapp.thing", entity_key=str(thing.pk))
    # Schedule: 201 with the new job, due in ten minutes (rounded up to a slot).
    assert created[:3] == ("POST", "/prescient/jobs", 201)
    assert created[3]["id"] == job.pk and created[3]["check"] == "shop.unshipped"
    assert created[3]["entity"] == {"model": "testapp.thing", "key": str(thing.pk)}
    assert created[3]["state"] == "scheduled"
    first_due = when(created[3]["next_check_at"])
    assert first_due - when(created[3]["created_at"]) >= timedelta(minutes=10)
    # The job by the id the session kept, then a page of scheduled jobs that holds it.
    assert one[:3] == ("GET", f"/prescient/jobs/{job.pk}", 200)
    assert one[3]["id"] == job.pk and one[3]["state"] == "scheduled"
    assert page[:3] == ("GET", "/prescient/jobs?state=scheduled", 200)
    assert [item["id"] for item in page[3]["items"]] == [job.pk] and "next_cursor" in page[3]
    # Run it now: 200, due at once, earlier than its first due time.
    assert ran[:3] == ("POST", f"/prescient/jobs/{job.pk}/run", 200)
    assert ran[3]["id"] == job.pk and ran[3]["state"] == "scheduled"
    assert when(ran[3]["next_check_at"]) < first_due
    job.refresh_from_db()  # the API gives milliseconds
    assert job.next_check_at.replace(microsecond=job.next_check_at.microsecond // 1000 * 1000) == when(
        ran[3]["next_check_at"]
    )

    # "The next pass runs it; the job then leaves the live table and the history shows it."
    Thing.objects.filter(pk=thing.pk).update(status="shipped")
    assert prescient.tick().counts["completed"] == 1
    base = f"{live_server.url}/prescient"
    assert get(f"{base}/jobs/{job.pk}", token)[0] == 404
    status, history = get(f"{base}/history?job_id={job.pk}", token)
    assert status == 200 and [(h["job_id"], h["outcome"]) for h in history["items"]] == [(job.pk, "completed")]
    assert JobHistory.objects.filter(job_id=job.pk, outcome="completed").exists()


def test_adapt__refuses_a_session_that_lost_a_line_it_replaces() -> None:
    session = 'BASE=x\ncurl "$BASE/jobs" -d \'{"entity": {"model": "shop.order", "key": "4"}}\''
    with pytest.raises(AssertionError, match="TOKEN"):
        adapt(session, base="b", token="t", key=1)
