"""``TASKS[...]["OPTIONS"]`` of a prescient backend is validated by ``manage.py check``."""

from __future__ import annotations

import pytest

pytest.importorskip("django.tasks")

from prescient.system_checks import check_registry

BACKEND = "prescient.tasks.PrescientBackend"


def errors_for(settings, options):
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": options}}
    return [(e.id, e.msg) for e in check_registry() if e.id.startswith("prescient.E02")]


def test_valid_options__no_error(settings):
    options = {"MAX_RETRIES": 0, "TIMEOUT_SECONDS": 2.5, "RETRY_DELAY_SECONDS": 0, "ROUND_TO_SLOT": True}
    assert errors_for(settings, options) == []


def test_unknown_option__names_it_and_lists_the_known_ones(settings):
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_RETRYS": 3}}}
    [error] = [e for e in check_registry() if e.id == "prescient.E021"]
    assert "MAX_RETRYS" in error.msg
    # LIMITS: the option of limits per task path or queue (#33).
    assert error.hint == "Known options: LIMITS, MAX_RETRIES, RETRY_DELAY_SECONDS, ROUND_TO_SLOT, TIMEOUT_SECONDS"


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"MAX_RETRIES": -1}, "MAX_RETRIES"),
        ({"MAX_RETRIES": "3"}, "MAX_RETRIES"),
        ({"MAX_RETRIES": True}, "MAX_RETRIES"),
        ({"TIMEOUT_SECONDS": 0}, "TIMEOUT_SECONDS"),
        ({"TIMEOUT_SECONDS": "30"}, "TIMEOUT_SECONDS"),
        ({"RETRY_DELAY_SECONDS": -0.5}, "RETRY_DELAY_SECONDS"),
        ({"ROUND_TO_SLOT": "yes"}, "ROUND_TO_SLOT"),
    ],
)
def test_bad_value__is_an_error_naming_the_option(settings, options, key):
    errors = errors_for(settings, options)
    assert [i for i, _ in errors] == ["prescient.E022"]
    assert key in errors[0][1]


def test_options_not_a_dict__is_an_error(settings):
    assert [i for i, _ in errors_for(settings, ["MAX_RETRIES"])] == ["prescient.E020"]


def test_other_backends_options__are_not_ours_to_check(settings):
    settings.TASKS = {
        "default": {"BACKEND": BACKEND},
        "other": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "OPTIONS": {"ANYTHING": 1}},
    }
    assert [e for e in check_registry() if e.id.startswith("prescient.E02")] == []
