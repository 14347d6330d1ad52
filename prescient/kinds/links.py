"""Links into the Django admin, for the "entity" cell every kind draws (and the admin's pages)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.apps import apps
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Model
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from prescient.wording import entity_text


def entity_link(site: admin.AdminSite, entity_name: str, entity_key: str) -> str:
    """``entity_name#entity_key``, linked to the entity's change page when ``site`` has its model."""
    text = entity_text(entity_name, entity_key)
    try:
        model = apps.get_model(entity_name)
    except (LookupError, ValueError):
        return text
    if not site.is_registered(model):
        return text
    opts = model._meta
    try:
        url = reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change",
            args=[quote(entity_key)],
            current_app=site.name,
        )
    except NoReverseMatch:
        return text
    return format_html('<a href="{}">{}</a>', url, text)


def admin_url(site: admin.AdminSite, model: type[Model], view: str, *args: Any, **query: Any) -> str | None:
    """The URL of one of ``site``'s admin views for ``model``, or None if it has none."""
    if not site.is_registered(model):
        return None
    opts = model._meta
    try:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args, current_app=site.name)
    except NoReverseMatch:
        return None
    return f"{url}?{urlencode(query)}" if query else url
