"""What every page of prescient's admin shares.

Badges and their colours, times and durations as the admin shows them, the "entity" cell (drawn
by the job's kind), and the changelist pieces the job list and the job history both use: the
check and workflow filters, a date hierarchy from one query and an exact search
(:class:`ConsoleListMixin`).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.db.models import Max, Min, Model, Q, QuerySet
from django.http import HttpRequest, HttpResponseBase
from django.utils import formats, timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import capfirst
from django.utils.timesince import timesince
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from prescient.admin.reading import AdminMixinBase as AdminMixinBase  # the mixins of the admin import it from here
from prescient.admin.reading import ReadListMixin
from prescient.checks import registered
from prescient.engine.kind import UnknownKind, get_kind
from prescient.models import FutureJob, JobHistory, Workflow
from prescient.queries import entity_names
from prescient.states import Outcome, State
from prescient.wording import entity_text, parse_entity, when_text

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldsetSpec

# Badge colours come from the admin's own message palette, which has a light and a dark
# variant of each (fallbacks for admin themes without the variables).
INFO = "var(--message-info-bg, #ccefff)"
SUCCESS = "var(--message-success-bg, #dfd)"
WARNING = "var(--message-warning-bg, #ffc)"
ERROR = "var(--message-error-bg, #ffefef)"
QUIET = "var(--message-debug-bg, #efefef)"

# Keyed by the choices, looked up by a row's value (a plain str) as well.
STATE_COLOURS: dict[str, str] = {
    State.SCHEDULED: INFO,
    State.RESERVED: INFO,
    State.RUNNING: WARNING,
    State.PAUSED: QUIET,
    State.BURIED: ERROR,
    State.WAITING: "var(--darkened-bg, #f8f8f8)",
}
#: One colour per outcome (and for jobs still scheduled), the same in every chart and badge:
#: Okabe and Ito's palette for colour-blind readers (its eight, then two greys), each outcome
#: its own. The text beside it (legend, badge) carries the meaning; the colour tells them apart.
OUTCOME_HUES: dict[str, str] = {
    State.SCHEDULED: "#56b4e9",  # sky blue
    Outcome.COMPLETED: "#009e73",  # bluish green
    Outcome.MET: "#0072b2",  # blue
    Outcome.FAILED: "#d55e00",  # vermillion
    Outcome.KILLED: "#cc79a7",  # reddish purple
    Outcome.MISSED: "#e69f00",  # orange
    Outcome.MAX_CHECKS: "#f0e442",  # yellow
    Outcome.HORIZON: "#000000",  # black
    Outcome.CANCELLED: "#999999",  # grey
    Outcome.ENTITY_MISSING: "#5f4b32",  # dark brown
}


def tint(hue: str) -> str:
    """A badge's background: ``hue`` over the page's own background (light or dark mode)."""
    return f"color-mix(in srgb, {hue} 30%, var(--body-bg, #fff))"


OUTCOME_COLOURS: dict[str, str] = {outcome: tint(OUTCOME_HUES[outcome]) for outcome in Outcome}


# --- rendering helpers -------------------------------------------------------------------------


def badge(label: object, colour: str) -> SafeString:
    """A small coloured label; the text, not the colour alone, carries the meaning."""
    return format_html(
        '<span style="display:inline-block;padding:1px 8px;border-radius:8px;white-space:nowrap;'
        'background:{};color:var(--body-fg, #333);border:1px solid var(--border-color, #ccc)">{}</span>',
        colour,
        label,
    )


def when(value: datetime | None) -> str:
    """A datetime as the admin shows one (local time, localized)."""
    if value is None:
        return "-"
    return when_text(value)


def entity_cell(site: admin.AdminSite, row: FutureJob | JobHistory) -> str:
    """The "entity" cell of a job or history row, as its kind draws it (plain text for an unknown kind)."""
    try:
        kind = get_kind(row.kind)
    except UnknownKind:
        return entity_text(row.entity_name, row.entity_key)
    return kind.describe_html(row, site)


def breakable(name: str) -> SafeString:
    """``name`` (a worker's ``host:pid:id``, a host's ``ip-10-0-12-30.eu-west-1…``, a check's
    ``shop.send_payment_reminder``) with a line break allowed after each ``:``, ``.`` and ``_``
    and nowhere inside its parts (its words)."""
    return mark_safe(re.sub(r"([:._])", r"\1<wbr>", str(escape(name))))  # escaped first


def kind_word(row: FutureJob | JobHistory) -> str:
    """What a job's code is, in a sentence: "check", "expectation", "task" (its kind's name)."""
    try:
        return get_kind(row.kind).verbose_name or row.kind
    except UnknownKind:
        return row.kind or "check"


def error_time(value: object) -> str:
    """The time of a ``recent_errors`` entry (an ISO 8601 string), as the admin shows times."""
    try:
        return when(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def duration(seconds: float | None) -> str:
    """Seconds as a short duration: ``0.25 s``, ``12.5 s``, ``3 min 20 s``, ``2 h 5 min``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return gettext("%(seconds).2f s") % {"seconds": seconds}
    if seconds < 60:
        return gettext("%(seconds).1f s") % {"seconds": seconds}
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return gettext("%(minutes)d min %(seconds)d s") % {"minutes": minutes, "seconds": rest}
    hours, minutes = divmod(minutes, 60)
    return gettext("%(hours)d h %(minutes)d min") % {"hours": hours, "minutes": minutes}


def ago(value: datetime | None, now: datetime) -> str:
    """How long ago ``value`` was, to the second when under two minutes."""
    if value is None:
        return "-"
    seconds = (now - value).total_seconds()
    if seconds < 120:
        return gettext("%(seconds)d s ago") % {"seconds": max(seconds, 0)}
    return gettext("%(time)s ago") % {"time": timesince(value, now)}


def can_view(site: admin.AdminSite, request: HttpRequest, model: type[Model]) -> bool:
    """Whether ``request.user`` may see ``model``'s pages on ``site``."""
    try:
        model_admin = site.get_model_admin(model)
    except NotRegistered:
        return False
    return model_admin.has_view_or_change_permission(request)


# --- filters -----------------------------------------------------------------------------------


class CheckFilter(admin.SimpleListFilter):
    """The registered checks, without a ``DISTINCT`` over a table that may hold millions of rows.

    A check no longer registered is still filtered by ``?job_exec=name`` (and then listed).
    """

    title = _("check")
    parameter_name = "job_exec"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, Any]]:
        names = {entry.name for entry in registered()}
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        return None if value is None else queryset.filter(job_exec=value)


class WorkflowFilter(admin.SimpleListFilter):
    """The workflows from their own small table, not a ``DISTINCT`` over the jobs."""

    title = _("workflow")
    parameter_name = "workflow"
    #: Workflows offered in the filter (any other is one search or ``?workflow=name`` away).
    limit = 50

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, Any]]:
        names = list(Workflow.objects.order_by("name").values_list("name", flat=True)[: self.limit])
        if self.value() and self.value() not in names:
            names.append(str(self.value()))
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        return None if value is None else queryset.filter(workflow=value)


def fieldset_names(fieldsets: _FieldsetSpec) -> list[str]:
    """Every field name of ``fieldsets``, in order (the names of a line of several included)."""
    names: list[str] = []
    for _title, options in fieldsets:
        for entry in options["fields"]:
            names.extend([entry] if isinstance(entry, str) else entry)
    return names


# --- a changelist that stays fast on a large table ----------------------------------------------


def light_date_hierarchy(cl: Any) -> dict[str, Any]:
    """The context of ``admin/date_hierarchy.html``, as Django's own tag makes it, from one query.

    Django's tag runs ``SELECT DISTINCT`` of the truncated dates over every row shown, which
    reads the whole table; this one asks only for the first and last date and lists every year,
    month or day between them (one that holds no job shows an empty list).
    """
    field_name = cl.date_hierarchy
    verbose_name = cl.model._meta.get_field(field_name).verbose_name
    year_field, month_field, day_field = (f"{field_name}__{part}" for part in ("year", "month", "day"))
    year, month, day = (cl.params.get(name) for name in (year_field, month_field, day_field))

    def link(filters: dict[str, Any]) -> str:
        return str(cl.get_query_string(filters, [f"{field_name}__"]))

    if year and month and day:
        chosen = date(int(year), int(month), int(day))
        return {
            "show": True,
            "field_name": verbose_name,
            "back": {
                "link": link({year_field: year, month_field: month}),
                "title": capfirst(formats.date_format(chosen, "YEAR_MONTH_FORMAT")),
            },
            "choices": [{"title": capfirst(formats.date_format(chosen, "MONTH_DAY_FORMAT"))}],
        }
    span = cl.queryset.aggregate(first=Min(field_name), last=Max(field_name))
    if span["first"] is None:
        return {"show": bool(year), "field_name": verbose_name, "back": {"link": link({}), "title": _("All dates")},
                "choices": []}
    first, last = (timezone.localtime(span[end]).date() for end in ("first", "last"))
    if not year and first.year == last.year:
        year = first.year
        if first.month == last.month:
            month = first.month
    if year and month:
        start = max(first, date(int(year), int(month), 1))
        days = [start + timedelta(days=n) for n in range((last - start).days + 1)]
        return {
            "show": True,
            "field_name": verbose_name,
            "back": {"link": link({year_field: year}), "title": str(year)},
            "choices": [
                {
                    "link": link({year_field: year, month_field: month, day_field: one.day}),
                    "title": capfirst(formats.date_format(one, "MONTH_DAY_FORMAT")),
                }
                for one in days
                if one.month == int(month)
            ],
        }
    if year:
        first_month = first.month if first.year == int(year) else 1
        last_month = last.month if last.year == int(year) else 12
        months = range(first_month, last_month + 1)
        return {
            "show": True,
            "field_name": verbose_name,
            "back": {"link": link({}), "title": _("All dates")},
            "choices": [
                {
                    "link": link({year_field: year, month_field: number}),
                    "title": capfirst(formats.date_format(date(int(year), number, 1), "YEAR_MONTH_FORMAT")),
                }
                for number in months
            ],
        }
    return {
        "show": True,
        "field_name": verbose_name,
        "choices": [
            {"link": link({year_field: str(number)}), "title": str(number)}
            for number in range(first.year, last.year + 1)
        ],
    }


def search_entities(queryset: QuerySet[Any], term: str) -> QuerySet[Any]:
    """Rows of an entity key (``42``, or ``shop.order:42``; the older ``shop.order#42`` too) or
    of a workflow, matched exactly.

    Exact matches are index lookups; a partial match would read every row of a large table.
    A bare key is looked up under each entity name in the table (:func:`entity_names`, whether
    or not a check of that model is registered still), and as a workflow name: one ``OR`` whose
    halves are each answered by an index (the history's workflow one: migration 0027).
    """
    term = term.strip()
    if not term:
        return queryset
    parsed = parse_entity(term)
    if parsed is not None:
        return queryset.filter(entity_name=parsed[0], entity_key=parsed[1])
    names = entity_names(queryset)
    by_key = Q(entity_key=term) if names is None else Q(entity_name__in=names, entity_key=term)
    # The term is never blank: "not blank" changes no result, but states the history's partial
    # index's condition, which SQLite (and PostgreSQL's generic plan of a prepared query) use
    # only when the query says it in so many words.
    return queryset.filter(by_key | (Q(workflow=term) & ~Q(workflow="")))


def unfiltered_count(response: HttpResponseBase) -> HttpResponseBase:
    """No "(Show all)" link beside the search box of a list that no filter or search narrows.

    With ``show_full_result_count = False`` (no ``COUNT(*)`` over a large table) Django's
    full count is ``None``, never equal to the rows shown, so its search box always offers
    "(Show all)". A list with no filter and no search term shows all rows: its count is the full one.
    """
    cl = (getattr(response, "context_data", None) or {}).get("cl")
    if cl is not None and cl.full_result_count is None and not cl.query and not cl.get_filters_params():
        cl.full_result_count = cl.result_count
    return response


class TitledListMixin(ReadListMixin):
    """A changelist titled by the model, with no "(Show all)" when nothing narrows it, read off
    the primary (:class:`~prescient.admin.reading.ReadListMixin`)."""

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        # Rows change through actions, never a form: "Select … to change" would mislead.
        return {**super().list_context(request), "title": capfirst(self.opts.verbose_name_plural)}

    def finish_list(self, response: HttpResponseBase) -> None:
        super().finish_list(response)
        unfiltered_count(response)


class ConsoleListMixin(TitledListMixin):
    """The changelists of the jobs and their history: titled by the model (:class:`TitledListMixin`),
    Django's date hierarchy drawn from one query (see :func:`light_date_hierarchy`), and an exact
    search (see :func:`search_entities`)."""

    change_list_template = "prescient/admin/change_list.html"
    search_help_text = _("An entity key (42 or shop.order:42) or a workflow name, exactly.")

    @admin.display(description=_("check"), ordering="job_exec")
    def check_name(self, row: FutureJob | JobHistory) -> SafeString:
        """The check's name, broken only between its words (``shop.<wbr>send_<wbr>payment…``): with
        no break allowed, a long name widened its column until the last ones hid; with breaks
        anywhere, it broke mid-word at 1344 px."""
        return breakable(row.job_exec)

    def finish_list(self, response: HttpResponseBase) -> None:
        super().finish_list(response)
        context = getattr(response, "context_data", None) or {}
        if "cl" in context and context["cl"].date_hierarchy:
            context["prescient_date_hierarchy"] = light_date_hierarchy(context["cl"])

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        return search_entities(queryset, search_term), False
