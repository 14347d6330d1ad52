"""The admin's lists and dashboard read off the primary (:mod:`prescient.reads`).

A list shown (a GET) is read on ``PRESCIENT["READ_DATABASE"]``: its rows, counts, filters and
columns, all within :func:`prescient.reads.reading` (the page is rendered there, since a
changelist reads its rows while its template renders). A list posted to (an action) is read on
the primary, and the action acts on its rows read again there (:func:`prescient.reads.on_primary`).
A page read on a replica that lags says "as of" its last replay, beneath its title.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext

from prescient import reads
from prescient.admin.paging import EstimatedCountPaginator
from prescient.wording import offset_text, when_text

if TYPE_CHECKING:
    # The mixins of the admin are always combined with a ModelAdmin: type them as one.
    AdminMixinBase = admin.ModelAdmin[Any]
else:
    AdminMixinBase = object


def as_of_text(stamp: datetime, now: datetime | None = None) -> str:
    """The line of a page read on a replica that lags: the time it is as of, and how long ago."""
    behind = ((now or timezone.now()) - stamp).total_seconds()
    return gettext("As of %(time)s (%(behind)s ago): read on a replica that lags behind the primary") % {
        "time": when_text(stamp), "behind": offset_text(max(behind, 0.0)),
    }


def as_of_context(alias: str) -> dict[str, Any]:
    """``{"subtitle": …}`` when ``alias`` is a replica that lags (shown beneath the title)."""
    stamp = reads.as_of(alias)
    return {} if stamp is None else {"subtitle": as_of_text(stamp), "prescient_as_of": stamp}


class ReadListMixin(AdminMixinBase):
    """A changelist read off the primary when shown, on the primary when acted on. Subclasses
    add to its context (:meth:`list_context`) and to its response before it is rendered
    (:meth:`finish_list`)."""

    #: Counts that never scan a large table: the planner's estimate beyond 100,000 rows.
    paginator = EstimatedCountPaginator

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        return {}

    def finish_list(self, response: HttpResponseBase) -> None:
        """Change the response's context before it is rendered (within the reads)."""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        with reads.reading(request) as alias:
            context = {**self.list_context(request), **as_of_context(alias), **(extra_context or {})}
            response = super().changelist_view(request, context)
            self.finish_list(response)
            if isinstance(response, TemplateResponse):
                response.render()  # the rows, their columns and the filters are read while it renders
        return response

    def response_action(self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any) -> Any:
        """An action acts on its rows read on the primary (a GET may have shown them off it)."""
        return super().response_action(request, reads.on_primary(queryset), *args, **kwargs)
