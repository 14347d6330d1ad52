"""The confirmation page of a job-list action that asks for something first (kill: a reason;
sleep: a time): the jobs it will touch, previewed, and its form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django
from django import forms
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from prescient.models import FutureJob

#: Jobs listed on a confirmation page; the rest are counted.
PREVIEW = 50


def confirmation_page(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[FutureJob], *, form: forms.Form,
    title: Callable[[int], str], action: str, template: str,
) -> TemplateResponse:
    """The page of ``action`` over ``queryset`` with ``form``; ``title(total)`` heads it."""
    total = queryset.count()
    jobs = list(queryset[:PREVIEW])
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title(total),
        "opts": modeladmin.opts,
        "form": form,
        "jobs": jobs,
        "total": total,
        "more": max(total - len(jobs), 0),
        "action": action,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across") in ("1", "True", "true", "on"),
        "back_url": request.get_full_path(),
        # Django 6 draws breadcrumbs as a list, 5.2 as a div.
        "breadcrumbs_as_list": django.VERSION >= (6, 0),
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, template, context)
