"""On Django 5.2 the django.tasks backend is unavailable, with a message that says why."""

from __future__ import annotations

import importlib

import pytest
from django.core.exceptions import ImproperlyConfigured


def test_backend__needs_django_6():
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("django.tasks is available")
    with pytest.raises(ImproperlyConfigured, match="needs Django 6.0 or later"):
        importlib.import_module("prescient.tasks")
