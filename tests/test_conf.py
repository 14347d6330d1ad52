"""``PRESCIENT`` and a prescient task backend's ``OPTIONS`` are validated when first read
(issue #27, item 3), by the same table as the system checks."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured

import prescient
from prescient.conf import BadSetting, reporting, setting
from prescient.system_checks import check_settings

BAD = [
    ("SLOT_MINUTES", 7),
    ("SLOT_MINUTES", "15"),
    ("TIMEOUT_SECONDS", -1),
    ("WORKER_HEARTBEAT_SECONDS", 0),
    ("CHILD_MEMORY_MB", 64),
    ("BATCH_SIZE", 0),
    ("HISTORY_RETENTION_DAYS", {"*": -1}),
    ("ERROR_HANDLER", None),
]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_first_read__a_bad_value_is_improperly_configured_naming_key_value_and_allowed(settings, key, value):
    settings.PRESCIENT = {key: value}
    with pytest.raises(ImproperlyConfigured) as raised:
        setting("SLOT_MINUTES")
    message = str(raised.value)
    assert f"PRESCIENT['{key}']" in message and repr(value if not isinstance(value, dict) else -1) in message
    [error] = [e for e in check_settings() if e.level >= 40]
    assert message == f"{error.msg}; {error.hint}"  # one table: the check says the same


@pytest.mark.django_db
def test_first_read__in_a_shell_slot_minutes_7_stops_schedule(settings, make_thing, t0):
    settings.PRESCIENT = {"SLOT_MINUTES": 7}
    with pytest.raises(ImproperlyConfigured, match=re.escape("PRESCIENT['SLOT_MINUTES'] must be a whole number")):
        prescient.schedule(make_thing(), "test.record", now=t0)


def test_first_read__a_typo_names_the_closest_setting(settings):
    settings.PRESCIENT = {"SLOT_MINUTE": 5}
    typo = r"Unknown setting PRESCIENT\['SLOT_MINUTE'\].*did you mean SLOT_MINUTES"
    with pytest.raises(ImproperlyConfigured, match=typo):
        setting("TIMEOUT_SECONDS")


def test_first_read__a_dict_changed_in_place_is_validated_again(settings):
    settings.PRESCIENT = {"SLOT_MINUTES": 5}
    assert setting("SLOT_MINUTES") == 5
    settings.PRESCIENT["SLOT_MINUTES"] = 7
    with pytest.raises(ImproperlyConfigured, match="got 7"):
        setting("SLOT_MINUTES")
    settings.PRESCIENT["SLOT_MINUTES"] = 10
    assert setting("SLOT_MINUTES") == 10


def test_first_read__not_a_dict(settings):
    settings.PRESCIENT = [("SLOT_MINUTES", 15)]
    with pytest.raises(ImproperlyConfigured, match="settings.PRESCIENT must be a dict; got list"):
        setting("SLOT_MINUTES")


# --- the task backend's OPTIONS -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"TIMEOUT_SECONDS": 0}, "TASKS['default']['OPTIONS']['TIMEOUT_SECONDS'] must be a number more than 0"),
        ({"MAX_RETRIES": "3"}, "TASKS['default']['OPTIONS']['MAX_RETRIES'] must be a whole number from 0"),
        ({"ROUND_TO_SLOT": "yes"}, "TASKS['default']['OPTIONS']['ROUND_TO_SLOT'] must be True or False; got 'yes'"),
        ({"MAX_RETRYS": 3}, "Unknown option TASKS['default']['OPTIONS']['MAX_RETRYS']"),
        (["MAX_RETRIES"], "TASKS['default']['OPTIONS'] must be a dict; got list"),
    ],
)
def test_task_backend__bad_options_when_first_used(settings, options, message):
    tasks = pytest.importorskip("django.tasks")
    settings.TASKS = {"default": {"BACKEND": "prescient.tasks.PrescientBackend", "OPTIONS": options}}
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        tasks.task_backends["default"]


def test_task_backend__good_options_are_accepted(settings):
    tasks = pytest.importorskip("django.tasks")
    settings.TASKS = {
        "default": {"BACKEND": "prescient.tasks.PrescientBackend", "OPTIONS": {"MAX_RETRIES": 2, "ROUND_TO_SLOT": True}}
    }
    assert tasks.task_backends["default"].options["MAX_RETRIES"] == 2


# --- while the system checks run (issue #32, item 2) -------------------------------------------


def test_reporting__a_good_setting_answers_beside_a_bad_one_and_a_bad_one_is_bad_setting(settings):
    settings.PRESCIENT = {"SLOT_MINUTES": 5, "WORKER_HEARTBEAT_SECONDS": 0}
    with reporting():
        assert setting("SLOT_MINUTES") == 5
        with pytest.raises(BadSetting, match=re.escape("PRESCIENT['WORKER_HEARTBEAT_SECONDS'] must be")):
            setting("WORKER_HEARTBEAT_SECONDS")
    with pytest.raises(ImproperlyConfigured, match="WORKER_HEARTBEAT_SECONDS"):  # elsewhere, as before
        setting("SLOT_MINUTES")


def test_reporting__not_a_dict__every_setting_is_bad(settings):
    settings.PRESCIENT = [("SLOT_MINUTES", 15)]
    with reporting(), pytest.raises(BadSetting, match="settings.PRESCIENT must be a dict"):
        setting("SLOT_MINUTES")


def test_reporting__an_unknown_key_makes_no_setting_bad(settings):
    settings.PRESCIENT = {"SLOT_MINUTE": 5}
    with reporting():
        assert setting("SLOT_MINUTES") == 15
