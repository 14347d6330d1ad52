"""``manage.py check`` with bad settings (issue #32, item 2): every bad key is listed at once as
its ``prescient.E0xx`` line and the command exits 1, never with a traceback.

The cases come from the table of docs/settings.md: each setting it lists, with each id of its
*check id* column, needs a bad value here (a setting or an id without one fails). Each runs
``manage.py check`` in a process of its own, as a user does (the bad value given through
PRESCIENT_TEST_SETTINGS, so Django starts with it), two at a time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.test_docs import DOCS, table_rows

pytestmark = pytest.mark.slow

#: Bad values of each setting, with the id ``manage.py check`` reports for it.
BAD: dict[str, list[tuple[Any, str]]] = {
    "SLOT_MINUTES": [(7, "E003")],
    "TIMEOUT_SECONDS": [(0, "E004")],
    "MAX_CHECKS": [(-1, "E005")],
    "HORIZON_DAYS": [(0, "E004")],
    "MAX_RETRIES": [(2.5, "E005")],
    "BATCH_SIZE": [(0, "E006")],
    "STALE_AFTER_SECONDS": [(-5, "E007")],
    "ERROR_HANDLER": [(42, "E008"), ("nowhere.nothing", "E008")],
    "RECENT_ERRORS": [(10**6, "E005")],
    "WORKER_HEARTBEAT_SECONDS": [(0, "E013")],
    "WORKER_POLL_SECONDS": [(0, "E013")],
    "WORKER_GRACE_SECONDS": [(-1, "E013")],
    "WORKER_PREFETCH": [(-1, "E009")],
    "WORKER_LANES": [(0, "E009")],
    "CHILD_MEMORY_MB": [(64, "E009")],
    "CHILD_MAX_RUNS": [(0, "E009")],
    "MAX_CRASHES": [(0, "E009")],
    "SAVE_NOTICES": [("yes", "E015")],
    "READ_DATABASE": [("nowhere", "E016"), (1, "E016")],
    "LISTEN_DATABASE": [("nowhere", "E018"), (1, "E018")],
    "HISTORY_PARTITION": [("week", "E017"), (None, "E017")],
    "CALENDARS": [
        (5, "E030"),
        ({"support": {"timezone": "Nowhere/Land", "hours": {"mon-fri": "09:00-17:00"}}}, "E031"),
    ],
    "HISTORY_RETENTION_DAYS": [(30, "E014"), ({"complete": 14}, "E011"), ({"*": -1}, "E012")],
}


def documented() -> dict[str, list[str]]:
    """``{setting: [check ids]}`` from the table of docs/settings.md."""
    rows = table_rows((DOCS / "settings.md").read_text(encoding="utf-8"))
    header = next(row for row in rows if row and row[0] == "setting")
    column = header.index("check id")
    found = {}
    for cells in rows:
        name = re.fullmatch(r"`([A-Z][A-Z0-9_]*)`", cells[0])
        if name:
            found[name.group(1)] = re.findall(r"`(E\d{3})`", cells[column])
    return found


def cases() -> list[Any]:
    """One case per bad value of each documented setting; a setting without one is a case
    that fails."""
    found = []
    for key in documented():
        for value, code in BAD.get(key, [(None, "")]):
            found.append(pytest.param(key, value, code, id=f"{key}={value!r}"[:60]))
    return found


def run_check(conf: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["PRESCIENT_TEST_SETTINGS"] = json.dumps(conf)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "django", "check", "--settings=tests.settings"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def all_bad() -> dict[str, Any]:
    """The first bad value of every setting, and a typo."""
    return {**{key: values[0][0] for key, values in BAD.items()}, "SLOT_MINUTE": 5}


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Every case's ``manage.py check``, started two at a time when the first test asks."""
    confs = [{key: value} for key, values in BAD.items() for value, _ in values] + [all_bad()]
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {json.dumps(conf, sort_keys=True): pool.submit(run_check, conf) for conf in confs}


def outcome(outcomes: dict[str, Future[subprocess.CompletedProcess[str]]], conf: dict[str, Any]) -> tuple[int, str]:
    done = outcomes[json.dumps(conf, sort_keys=True)].result(timeout=300)
    return done.returncode, done.stdout + done.stderr


def reported(output: str) -> set[str]:
    return set(re.findall(r"\(prescient\.([EWI]\d{3})\)", output))


def test_settings_table__each_setting_has_a_bad_value_for_each_of_its_check_ids():
    table = documented()
    assert table, "no settings table found in docs/settings.md"
    assert sorted(set(table) - set(BAD)) == [], "documented settings without a bad value here"
    assert sorted(set(BAD) - set(table)) == [], "bad values of settings docs/settings.md does not list"
    for key, ids in table.items():
        assert ids, f"{key}: no check id in the table of docs/settings.md"
        assert sorted({code for _, code in BAD[key]}) == sorted(ids), key


@pytest.mark.parametrize(("key", "value", "code"), cases())
def test_check__a_bad_value__is_listed_as_its_id_and_exits_1_without_a_traceback(outcomes, key, value, code):
    assert code, f"{key} has no bad value in BAD: add one"
    status, output = outcome(outcomes, {key: value})
    assert "Traceback" not in output, output
    assert status == 1, output
    assert f"(prescient.{code}) PRESCIENT['{key}']" in output, output
    assert reported(output) == {code}, "nothing else: a check that needs a bad setting says nothing more"


def test_check__every_setting_bad_at_once__lists_every_key_and_exits_1_without_a_traceback(outcomes):
    status, output = outcome(outcomes, all_bad())
    assert "Traceback" not in output, output
    assert status == 1, output
    for key, values in BAD.items():
        assert f"(prescient.{values[0][1]}) PRESCIENT['{key}']" in output, key
    assert "(prescient.E002) Unknown setting PRESCIENT['SLOT_MINUTE']" in output
    expected = {code for values in BAD.values() for code in [values[0][1]]} | {"E002"}
    assert reported(output) == expected
    assert output.count("(prescient.E") == len(BAD) + 1, "one line per bad key"
