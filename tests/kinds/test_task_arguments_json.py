"""A task's arguments are kept as they come back from JSON: flat ones (most tasks') are copied
as they are, without the round trip, and come out the same (Django 6 only)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("django.tasks")

from prescient.kinds.tasks import as_json


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([1, "two", 3.5, True, None], [1, "two", 3.5, True, None]),
        ({"a": 1, "b": -0.0}, {"a": 1, "b": -0.0}),
        ([], []),
        ({}, {}),
        ([(1, 2)], [[1, 2]]),  # nested: through JSON
        ({1: "x"}, {"1": "x"}),  # a key that is not text: through JSON
        ([10**30], [10**30]),
    ],
)
def test_as_json__is_what_json_gives_back(value, expected):
    result = as_json(value)
    assert result == expected
    assert type(result) is type(expected)
    assert result is not value  # a copy: the caller may change its own afterwards


@pytest.mark.parametrize("value", [[math.nan], {"x": math.inf}, ["a\x00b"], {"k": "\ud800"}, [object()]])
def test_as_json__refuses_what_json_or_the_database_cannot_keep(value):
    with pytest.raises((TypeError, ValueError)):
        as_json(value)
