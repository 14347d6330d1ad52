"""The admin: live jobs, their history and workflows.

Nothing here writes a job row. Every change is an action that calls a verb of
:mod:`prescient.services`, one job at a time, and reports per job what it did or why it refused.
Change pages are read-only: a saved form would overwrite a row the tick may be changing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

import django
from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.models import LogEntry
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import NotSupportedError
from django.db.models import Count, Func, IntegerField, Max, Min, Model, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import dateformat, formats, timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.timesince import timesince
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from . import services, slots
from .conf import setting, stale_after_seconds
from .exceptions import InvalidTransition, UnknownCheck
from .models import FutureJob, JobHistory, Worker, Workflow
from .registry import TASK_ENTITY, get_check, registered
from .states import Outcome, State
from .status import snapshot

#: Per action, at most this many "skipped" messages; the rest are counted in one more message.
MAX_SKIP_MESSAGES = 10
#: History rows shown on a job's page (the full list is one link away).
HISTORY_ROWS = 10
#: Jobs listed on the kill confirmation page.
KILL_PREVIEW = 50

# Badge colours come from the admin's own message palette, which has a light and a dark
# variant of each (fallbacks for admin themes without the variables).
_INFO = "var(--message-info-bg, #ccefff)"
_SUCCESS = "var(--message-success-bg, #dfd)"
_WARNING = "var(--message-warning-bg, #ffc)"
_ERROR = "var(--message-error-bg, #ffefef)"
_QUIET = "var(--message-debug-bg, #efefef)"

STATE_COLOURS = {
    State.SCHEDULED: _INFO,
    State.RUNNING: _WARNING,
    State.PAUSED: _QUIET,
    State.BURIED: _ERROR,
}
OUTCOME_COLOURS = {
    Outcome.COMPLETED: _SUCCESS,
    Outcome.MAX_CHECKS: _WARNING,
    Outcome.HORIZON: _WARNING,
    Outcome.FAILED: _ERROR,
    Outcome.ENTITY_MISSING: _QUIET,
    Outcome.CANCELLED: _QUIET,
    Outcome.KILLED: _ERROR,
}


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
    return str(formats.localize(timezone.template_localtime(value)))


def task_arguments(row: FutureJob | JobHistory) -> str:
    """A django.tasks job's call, e.g. ``add(4, 5, name='x')``, its arguments shortened."""
    payload = row.payload if isinstance(row.payload, dict) else {}
    args = [repr(value) for value in payload.get("args", [])]
    args += [f"{key}={value!r}" for key, value in (payload.get("kwargs") or {}).items()]
    text = ", ".join(args)
    if len(text) > 120:
        text = text[:119] + "…"
    return f"{row.job_exec.removeprefix('task:').rpartition('.')[2]}({text})"


def task_summary(row: FutureJob | JobHistory) -> str:
    """What the entity cell shows for a django.tasks job: its queue, priority and call."""
    return format_html(
        "{}<br><small>{}</small>", task_arguments(row),
        gettext("task · queue %(queue)s · priority %(priority)s") % {"queue": row.queue, "priority": row.priority},
    )


def entity_link(site: admin.AdminSite, entity_name: str, entity_key: str) -> str:
    """``entity_name#entity_key``, linked to the entity's change page when ``site`` has its model."""
    text = f"{entity_name}#{entity_key}"
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


def error_time(value: object) -> str:
    """The time of a ``recent_errors`` entry (an ISO 8601 string), as the admin shows times."""
    try:
        return when(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def checks_allowed(job_exec: str) -> int:
    """How many re-checks a job of ``job_exec`` may have (MAX_CHECKS if it is not registered)."""
    try:
        return get_check(job_exec).checks_allowed
    except UnknownCheck:
        return int(setting("MAX_CHECKS"))


def due_bounds(now: datetime, slot_minutes: int) -> tuple[datetime, datetime]:
    """``(slot_end, day_end)`` for the "due" filter.

    ``slot_end`` is the first slot boundary after ``now``: a job due by then runs at the end of
    the current slot. ``day_end`` is the next local midnight (never before ``slot_end``).
    """
    slot_end = slots.next_after(now, slot_minutes)
    tomorrow = timezone.localtime(now).date() + timedelta(days=1)
    day_end = timezone.make_aware(datetime.combine(tomorrow, time.min))
    return slot_end, max(slot_end, day_end)


def describe(job: FutureJob) -> str:
    return gettext("job %(id)s (%(check)s for %(name)s#%(key)s)") % {
        "id": job.pk,
        "check": job.job_exec,
        "name": job.entity_name,
        "key": job.entity_key,
    }


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


class DueFilter(admin.SimpleListFilter):
    """When a job is due, relative to now and the current slot.

    *Overdue*: its time has passed and no run is in flight. *This slot*: due by the end of the
    current slot. *Today*: later today (local time). *Later*: from tomorrow on.
    """

    title = _("due")
    parameter_name = "due"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, Any]]:
        return [
            ("overdue", _("Overdue")),
            ("slot", _("This slot")),
            ("today", _("Today")),
            ("later", _("Later")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> QuerySet[FutureJob] | None:
        value = self.value()
        if value is None:
            return None
        now = timezone.now()
        slot_end, day_end = due_bounds(now, int(setting("SLOT_MINUTES")))
        conditions = {
            "overdue": Q(next_check_at__lt=now, reserved_by=""),
            "slot": Q(next_check_at__gte=now, next_check_at__lte=slot_end),
            "today": Q(next_check_at__gt=slot_end, next_check_at__lt=day_end),
            "later": Q(next_check_at__gt=slot_end, next_check_at__gte=day_end),
        }
        condition = conditions.get(value)
        return None if condition is None else queryset.filter(condition)


class CheckFilter(admin.SimpleListFilter):
    """The registered checks, without a ``DISTINCT`` over a table that may hold millions of rows.

    A check no longer registered is still filtered by ``?job_exec=name`` (and then listed).
    """

    title = _("check")
    parameter_name = "job_exec"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, Any]]:
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

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, Any]]:
        names = list(Workflow.objects.order_by("name").values_list("name", flat=True)[: self.limit])
        if self.value() and self.value() not in names:
            names.append(str(self.value()))
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        return None if value is None else queryset.filter(workflow=value)


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
    """Rows of an entity key (``42``, or ``shop.order#42``) or of a workflow, matched exactly.

    Exact matches are index lookups; a partial match would read every row of a large table.
    A bare key is looked up among the models of the registered checks.
    """
    term = term.strip()
    if not term:
        return queryset
    name, hash_sign, key = term.rpartition("#")
    if hash_sign and name:
        return queryset.filter(entity_name=name.lower(), entity_key=key)
    labels = {entry.model_label for entry in registered()}
    by_key = Q(entity_key=term)
    if labels and None not in labels:
        by_key &= Q(entity_name__in=sorted(label for label in labels if label))
    return queryset.filter(by_key | Q(workflow=term))


class ConsoleListMixin:
    """The changelists of prescient's admin: titled by the model, Django's date hierarchy
    drawn from one query (see :func:`light_date_hierarchy`), and an exact search (see
    :func:`search_entities`)."""

    change_list_template = "prescient/admin/change_list.html"
    search_help_text = _("An entity key (42 or shop.order#42) or a workflow name, exactly.")

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Rows change through actions, never a form: "Select … to change" would mislead.
        title = {"title": capfirst(self.opts.verbose_name_plural)}  # type: ignore[attr-defined]
        response = super().changelist_view(request, {**title, **(extra_context or {})})  # type: ignore[misc]
        context = getattr(response, "context_data", None) or {}
        if "cl" in context and context["cl"].date_hierarchy:
            context["prescient_date_hierarchy"] = light_date_hierarchy(context["cl"])
        return response

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        return search_entities(queryset, search_term), False


# --- jobs --------------------------------------------------------------------------------------


class KillForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("Kept in each job's history row."),
    )


@admin.register(FutureJob)
class FutureJobAdmin(ConsoleListMixin, admin.ModelAdmin):
    list_display = [
        "entity", "job_exec", "state_badge", "next_check", "checks_used", "failure_count", "workflow",
    ]
    # The entity cell may hold a link of its own; the check links to the job.
    list_display_links = ["job_exec"]
    list_filter = ["state", DueFilter, CheckFilter, WorkflowFilter]
    # Exact matches only (see search_entities): a partial key ("1") would read a large table.
    search_fields = ["=entity_key", "=workflow"]
    date_hierarchy = "next_check_at"
    ordering = ["next_check_at", "id"]
    show_full_result_count = False
    actions = ["pause_jobs", "release_jobs", "run_jobs_now", "kill_jobs"]
    fieldsets = [
        (None, {"fields": ["entity", "job_exec", "workflow", "state_badge", "last_state", "next_check"]}),
        (_("Counters"), {"fields": ["checks_used", "run_count", "failure_count", "run_time"]}),
        (_("Run in flight"), {"fields": ["reserved_at", "reserved_by", "end_requested", "end_reason"]}),
        (_("Errors"), {"fields": ["last_error", "recent_errors_table"]}),
        (_("Dates"), {"fields": ["first_check_at", "created_at"]}),
        (_("Task (django.tasks)"), {"fields": ["queue", "priority", "payload"], "classes": ["collapse"]}),
        (_("History"), {"fields": ["admin_log", "history_table"]}),
    ]
    readonly_fields = [name for _title, options in fieldsets for name in options["fields"]]

    # All changes go through the actions: no adding, deleting or saving a job's form.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: FutureJob | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: FutureJob | None = None) -> bool:
        # Without an object this gates the actions; a job's own page is view-only.
        return obj is None and super().has_change_permission(request)

    # --- the dashboard

    change_list_template = "prescient/admin/futurejob_change_list.html"

    def get_urls(self) -> list[URLPattern]:
        dashboard = path(
            "dashboard/",
            self.admin_site.admin_view(self.dashboard_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_dashboard",
        )
        return [dashboard, *super().get_urls()]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Counts per state, due and finished jobs per slot as charts, the oldest overdue job, workers."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **dashboard_context(self.admin_site, request, timezone.now()),
            "title": gettext("Dashboard"),
            "opts": self.opts,
            "breadcrumbs_as_list": django.VERSION >= (6, 0),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "prescient/admin/dashboard.html", context)

    # --- columns and fields

    @admin.display(description=_("entity"), ordering="entity_key")
    def entity(self, job: FutureJob) -> str:
        if job.entity_name == TASK_ENTITY:
            return task_summary(job)
        return entity_link(self.admin_site, job.entity_name, job.entity_key)

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, job: FutureJob) -> SafeString:
        return badge(job.get_state_display(), STATE_COLOURS.get(job.state, _QUIET))

    @admin.display(description=_("next check"), ordering="next_check_at")
    def next_check(self, job: FutureJob) -> str:
        now = timezone.now()
        if job.in_flight:
            if job.reserved_at is None:
                return when(job.next_check_at)
            running = gettext("run in flight for %(time)s") % {"time": timesince(job.reserved_at, now)}
            return format_html("{}<br><small>{}</small>", when(job.next_check_at), running)
        if job.next_check_at < now:
            late = gettext("overdue by %(time)s") % {"time": timesince(job.next_check_at, now)}
            return format_html(
                '{}<br><small style="color:var(--error-fg, #ba2121)">{}</small>', when(job.next_check_at), late
            )
        return when(job.next_check_at)

    @admin.display(description=_("checks used / max"), ordering="check_count")
    def checks_used(self, job: FutureJob) -> str:
        return f"{job.check_count} / {checks_allowed(job.job_exec)}"

    @admin.display(description=_("run time"))
    def run_time(self, job: FutureJob) -> str:
        """Time spent in the check so far, over all of the job's runs."""
        return duration(job.total_run_seconds)

    @admin.display(description=_("recent errors"))
    def recent_errors_table(self, job: FutureJob) -> str:
        rows = []
        for entry in reversed(job.recent_errors or []):
            if isinstance(entry, dict):
                rows.append((error_time(entry.get("at", "")), entry.get("error", "")))
            else:
                rows.append(("", str(entry)))
        if not rows:
            return "-"
        body = format_html_join("", "<tr><td>{}</td><td><code>{}</code></td></tr>", rows)
        return format_html(
            "<table><thead><tr><th>{}</th><th>{}</th></tr></thead><tbody>{}</tbody></table>",
            gettext("at"),
            gettext("error"),
            body,
        )

    @admin.display(description=_("changes in the admin"))
    def admin_log(self, job: FutureJob) -> str:
        """What people did to this job here (pause, release, run now, kill), newest first."""
        entries = list(
            LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(job), object_id=str(job.pk))
            .select_related("user")
            .order_by("-action_time")[:HISTORY_ROWS]
        )
        if not entries:
            return gettext("None yet.")
        return format_html(
            "<table><thead><tr><th>{}</th><th>{}</th><th>{}</th></tr></thead><tbody>{}</tbody></table>",
            gettext("at"),
            gettext("user"),
            gettext("change"),
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                ((when(entry.action_time), entry.user, entry.get_change_message()) for entry in entries),
            ),
        )

    @admin.display(description=_("earlier jobs"))
    def history_table(self, job: FutureJob) -> str:
        """Earlier jobs of the same check for the same entity, newest first."""
        past = JobHistory.objects.filter(
            entity_name=job.entity_name, entity_key=job.entity_key, job_exec=job.job_exec
        ).order_by("-finished_at", "-id")
        rows = list(past[:HISTORY_ROWS])
        if not rows:
            return gettext("No earlier jobs of this check for this entity.")
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    when(row.finished_at),
                    badge(row.get_outcome_display(), OUTCOME_COLOURS.get(row.outcome, _QUIET)),
                    row.check_count,
                    row.run_count,
                    row.failure_count,
                    row.reason or row.last_error or "",
                )
                for row in rows
            ),
        )
        table = format_html(
            "<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>",
            format_html_join(
                "", "<th>{}</th>",
                (
                    (gettext("finished at"),), (gettext("outcome"),), (gettext("checks"),),
                    (gettext("runs"),), (gettext("failures"),), (gettext("reason"),),
                ),
            ),
            body,
        )
        url = admin_url(
            self.admin_site, JobHistory, "changelist",
            entity_name=job.entity_name, entity_key=job.entity_key, job_exec=job.job_exec,
        )
        if url is None:
            return table
        return format_html('{}<p><a href="{}">{}</a></p>', table, url, gettext("All of them in the job history"))

    # --- actions

    def _apply(
        self,
        request: HttpRequest,
        jobs: Iterable[FutureJob],
        verb: Callable[[FutureJob], str],
        log: dict[str, str],
    ) -> Counter[str]:
        """Call ``verb`` on each job; count what it returns, report refusals, log the changes.

        ``verb`` returns a key of ``log`` (the change-log message) or another key for "nothing
        to do". Refusals (the job's state does not allow it, or it has finished) are warnings.
        """
        done: Counter[str] = Counter()
        skipped = 0
        for job in jobs:
            try:
                what = verb(job)
            except (InvalidTransition, services.JobNotFound) as exc:
                skipped += 1
                if skipped <= MAX_SKIP_MESSAGES:
                    messages.warning(
                        request, gettext("Skipped %(job)s: %(reason)s") % {"job": describe(job), "reason": exc}
                    )
                continue
            done[what] += 1
            if what in log:
                self.log_change(request, job, log[what])
        if skipped > MAX_SKIP_MESSAGES:
            more = skipped - MAX_SKIP_MESSAGES
            messages.warning(
                request,
                ngettext("…and %(count)d more job skipped.", "…and %(count)d more jobs skipped.", more)
                % {"count": more},
            )
        return done

    @admin.action(description=_("Pause selected jobs"), permissions=["change"])
    def pause_jobs(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> None:
        done = self._apply(
            request, queryset,
            lambda job: "paused" if services.pause(job=job) else "unchanged",
            {"paused": gettext("Paused from the admin.")},
        )
        if done["paused"]:
            messages.success(
                request,
                ngettext("Paused %(count)d job.", "Paused %(count)d jobs.", done["paused"])
                % {"count": done["paused"]},
            )
        if done["unchanged"]:
            messages.info(
                request,
                ngettext(
                    "%(count)d job was paused already.", "%(count)d jobs were paused already.", done["unchanged"]
                ) % {"count": done["unchanged"]},
            )

    @admin.action(description=_("Release selected jobs"), permissions=["change"])
    def release_jobs(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> None:
        done = self._apply(
            request, queryset,
            lambda job: "released" if services.release(job=job) else "unchanged",
            {"released": gettext("Released from the admin.")},
        )
        if done["released"]:
            messages.success(
                request,
                ngettext("Released %(count)d job.", "Released %(count)d jobs.", done["released"])
                % {"count": done["released"]},
            )
        if done["unchanged"]:
            messages.info(
                request,
                ngettext(
                    "%(count)d job was not paused: nothing to release.",
                    "%(count)d jobs were not paused: nothing to release.",
                    done["unchanged"],
                ) % {"count": done["unchanged"]},
            )

    @admin.action(description=_("Run selected jobs now"), permissions=["change"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> None:
        def run(job: FutureJob) -> str:
            services.run_now(job)
            return "due"

        done = self._apply(request, queryset, run, {"due": gettext("Made due now from the admin.")})
        if done["due"]:
            messages.success(
                request,
                ngettext("%(count)d job is due now.", "%(count)d jobs are due now.", done["due"])
                % {"count": done["due"]},
            )

    @admin.action(description=_("Kill selected jobs (asks for a reason)"), permissions=["change"])
    def kill_jobs(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> HttpResponse | None:
        """Ask for a reason on a confirmation page, then kill each job with it."""
        if request.POST.get("post") == "yes":
            form = KillForm(request.POST)
            if form.is_valid():
                reason = form.cleaned_data["reason"]
                self._kill(request, queryset, reason)
                return None
        else:
            form = KillForm()
        total = queryset.count()
        jobs = list(queryset[:KILL_PREVIEW])
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Kill jobs"),
            "opts": self.opts,
            "form": form,
            "jobs": jobs,
            "total": total,
            "more": max(total - len(jobs), 0),
            "action": "kill_jobs",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across") in ("1", "True", "true", "on"),
            "back_url": request.get_full_path(),
            # Django 6 draws breadcrumbs as a list, 5.2 as a div.
            "breadcrumbs_as_list": django.VERSION >= (6, 0),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "prescient/admin/kill_confirmation.html", context)

    def _kill(self, request: HttpRequest, queryset: QuerySet[FutureJob], reason: str) -> None:
        logged = gettext("Killed from the admin: %(reason)s") % {"reason": reason}
        requested = gettext("Kill requested from the admin (run in flight): %(reason)s") % {"reason": reason}
        done = self._apply(
            request, queryset, lambda job: services.kill(job, reason), {"ended": logged, "requested": requested}
        )
        if done["ended"]:
            messages.success(
                request,
                ngettext("Killed %(count)d job.", "Killed %(count)d jobs.", done["ended"])
                % {"count": done["ended"]},
            )
        if done["requested"]:
            messages.success(
                request,
                ngettext(
                    "%(count)d job is running: it ends killed when its run returns.",
                    "%(count)d jobs are running: each ends killed when its run returns.",
                    done["requested"],
                ) % {"count": done["requested"]},
            )


# --- history -----------------------------------------------------------------------------------


@admin.register(JobHistory)
class JobHistoryAdmin(ConsoleListMixin, admin.ModelAdmin):
    list_display = [
        "job_exec", "entity", "outcome_badge", "check_count", "run_count", "failure_count",
        "run_time", "time_per_run", "lifetime", "finished_at", "workflow",
    ]
    list_filter = ["outcome", CheckFilter]
    search_fields = ["=entity_key", "=workflow"]
    date_hierarchy = "finished_at"
    actions = ["retry_tasks"]
    show_full_result_count = False
    fieldsets = [
        (None, {"fields": ["entity", "job_exec", "workflow", "outcome_badge", "reason", "last_error"]}),
        (_("Counters"), {"fields": ["check_count", "run_count", "failure_count", "run_time", "time_per_run"]}),
        (_("Dates"), {"fields": ["created_at", "first_check_at", "finished_at", "lifetime"]}),
        (_("Job"), {"fields": ["job_id"]}),
        (_("Task (django.tasks)"), {"fields": ["queue", "priority", "payload", "return_value", "errors"], "classes": ["collapse"]}),
    ]
    readonly_fields = [name for _title, options in fieldsets for name in options["fields"]]

    # History is a record: nobody adds, edits or deletes it here.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: JobHistory | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: JobHistory | None = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        """Retrying a task creates a job: it takes the permission to add one."""
        return request.user.has_perm("prescient.add_futurejob")

    @admin.action(description=_("Retry selected tasks (enqueue them again)"), permissions=["retry"])
    def retry_tasks(self, request: HttpRequest, queryset: QuerySet[JobHistory]) -> None:
        from . import tasks  # Django 6 only; a task row exists only where tasks are configured

        retried = 0
        for row in queryset:
            if row.entity_name != TASK_ENTITY:
                messages.warning(request, gettext("%(row)s is a check, not a task: skipped.") % {"row": row})
                continue
            try:
                result = tasks.retry(row)
            except Exception as exc:  # an unknown task, or one its backend refuses: say why
                messages.warning(request, gettext("%(row)s was not retried: %(error)s") % {"row": row, "error": exc})
                continue
            self.log_change(request, row, gettext("Retried as job %(id)s.") % {"id": result.id})
            retried += 1
        if retried:
            messages.success(
                request,
                ngettext("Retried %(count)d task.", "Retried %(count)d tasks.", retried) % {"count": retried},
            )

    @admin.display(description=_("entity"), ordering="entity_key")
    def entity(self, row: JobHistory) -> str:
        if row.entity_name == TASK_ENTITY:
            return task_summary(row)
        return entity_link(self.admin_site, row.entity_name, row.entity_key)

    @admin.display(description=_("return value"))
    def return_value(self, row: JobHistory) -> str:
        payload = row.payload if isinstance(row.payload, dict) else {}
        return repr(payload["return_value"]) if "return_value" in payload else "-"

    @admin.display(description=_("outcome"), ordering="outcome")
    def outcome_badge(self, row: JobHistory) -> SafeString:
        return badge(row.get_outcome_display(), OUTCOME_COLOURS.get(row.outcome, _QUIET))

    @admin.display(description=_("run time"), ordering="total_run_seconds")
    def run_time(self, row: JobHistory) -> str:
        """Time spent in the check, over all of the job's runs."""
        return duration(row.total_run_seconds)

    @admin.display(description=_("per run"))
    def time_per_run(self, row: JobHistory) -> str:
        return duration(row.total_run_seconds / row.run_count) if row.run_count else "-"

    @admin.display(description=_("lifetime"))
    def lifetime(self, row: JobHistory) -> str:
        """From the job's creation to its end."""
        return duration((row.finished_at - row.created_at).total_seconds())


# --- workflows ---------------------------------------------------------------------------------


def _jobs_in(state: State) -> Coalesce:
    """How many jobs of the outer workflow are in ``state`` (served by ``prescient_job_workflow``)."""
    count = (
        FutureJob.objects.filter(workflow=OuterRef("name"), state=state)
        .order_by()
        .values("workflow")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(count, output_field=IntegerField()), 0)


def _state_column(state: State) -> Callable[[WorkflowAdmin, Workflow], str]:
    @admin.display(description=state.label, ordering=f"jobs_{state.value}")
    def column(self: WorkflowAdmin, workflow: Workflow) -> str:
        count = getattr(workflow, f"jobs_{state.value}", 0)
        url = admin_url(self.admin_site, FutureJob, "changelist", workflow=workflow.name, state__exact=state.value)
        if not count or url is None:
            return str(count)
        return format_html('<a href="{}">{}</a>', url, count)

    column.__name__ = f"{state.value}_jobs"
    return column


def pause_workflow(name: str) -> str:
    """Pause workflow ``name`` through the service; the message to report and log."""
    count = services.pause(workflow=name)
    return ngettext(
        "Paused workflow %(name)s: %(count)d job paused.",
        "Paused workflow %(name)s: %(count)d jobs paused.",
        count,
    ) % {"name": name, "count": count}


def release_workflow(name: str) -> str:
    """Release workflow ``name`` through the service; the message to report and log."""
    count = services.release(workflow=name)
    return ngettext(
        "Released workflow %(name)s: %(count)d job released.",
        "Released workflow %(name)s: %(count)d jobs released.",
        count,
    ) % {"name": name, "count": count}


#: The verbs of the per-row buttons: URL name suffix -> (verb, button label).
WORKFLOW_VERBS: dict[str, tuple[Callable[[str], str], Any]] = {
    "pause": (pause_workflow, _("Pause")),
    "release": (release_workflow, _("Release")),
}


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "paused_at", "scheduled_jobs", "running_jobs", "paused_jobs", "buried_jobs"]
    search_fields = ["name"]
    ordering = ["name"]
    show_full_result_count = False
    actions = ["pause_workflows", "release_workflows"]
    fields = ["name", "status", "paused_at", "scheduled_jobs", "running_jobs", "paused_jobs", "buried_jobs"]
    readonly_fields = fields

    scheduled_jobs = _state_column(State.SCHEDULED)
    running_jobs = _state_column(State.RUNNING)
    paused_jobs = _state_column(State.PAUSED)
    buried_jobs = _state_column(State.BURIED)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workflow]:
        return super().get_queryset(request).annotate(**{f"jobs_{s.value}": _jobs_in(s) for s in State})

    # Workflows appear when a job names one; pausing and releasing are the actions.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return obj is None and super().has_change_permission(request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        title = {"title": capfirst(self.opts.verbose_name_plural)}
        return super().changelist_view(request, {**title, **(extra_context or {})})

    @admin.display(description=_("status"), ordering="paused_at")
    def status(self, workflow: Workflow) -> SafeString:
        if workflow.is_paused:
            return badge(gettext("paused"), STATE_COLOURS[State.PAUSED])
        return badge(gettext("active"), STATE_COLOURS[State.SCHEDULED])

    # --- a Pause and a Release button on each row

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        columns = list(super().get_list_display(request))
        if self.has_change_permission(request):
            columns.append(self._row_buttons(request))
        return columns

    def _row_buttons(self, request: HttpRequest) -> Callable[[Workflow], str]:
        """The buttons column, for ``request``'s filters (kept when the button returns to the list).

        The buttons submit the changelist's own form (and so its CSRF token) to the workflow's
        ``pause/`` or ``release/`` URL, by ``formaction``: forms cannot nest.
        """
        filters = request.GET.urlencode()
        query = "?" + urlencode({"_changelist_filters": filters}) if filters else ""
        opts = self.opts

        @admin.display(description=_("pause / release"))
        def workflow_buttons(workflow: Workflow) -> str:
            buttons = []
            for verb, (_func, label) in WORKFLOW_VERBS.items():
                url = reverse(
                    f"admin:{opts.app_label}_{opts.model_name}_{verb}",
                    args=[quote(workflow.pk)],
                    current_app=self.admin_site.name,
                )
                # The button that would change nothing is shown, disabled.
                idle = workflow.is_paused if verb == "pause" else not (
                    workflow.is_paused or getattr(workflow, "jobs_paused", 0)
                )
                buttons.append(
                    format_html(
                        '<button type="submit" class="button prescient-row-button" formmethod="post" '
                        'formaction="{}{}" name="_prescient_verb" value="{}"{}>{}</button>',
                        url, query, verb, " disabled" if idle else "", label,
                    )
                )
            return format_html_join(" ", "{}", ((button,) for button in buttons))

        return workflow_buttons

    def get_urls(self) -> list[URLPattern]:
        opts = self.opts
        verbs = [
            path(
                f"<path:object_id>/{verb}/",
                self.admin_site.admin_view(self.workflow_verb_view),
                {"verb": verb},
                name=f"{opts.app_label}_{opts.model_name}_{verb}",
            )
            for verb in WORKFLOW_VERBS
        ]
        return [*verbs, *super().get_urls()]

    def workflow_verb_view(self, request: HttpRequest, object_id: str, verb: str) -> HttpResponse:
        """POST only: pause or release one workflow, then back to the list with its filters."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        workflow = self.get_object(request, unquote(object_id))
        if workflow is None:
            raise Http404(gettext("No workflow %(name)r.") % {"name": unquote(object_id)})
        self._each(request, [workflow], WORKFLOW_VERBS[verb][0])
        url = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist", current_app=self.admin_site.name
        )
        context = {"preserved_filters": self.get_preserved_filters(request), "opts": self.opts}
        return HttpResponseRedirect(add_preserved_filters(context, url))

    # --- bulk actions

    @admin.action(description=_("Pause selected workflows"), permissions=["change"])
    def pause_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._each(request, queryset, pause_workflow)

    @admin.action(description=_("Release selected workflows"), permissions=["change"])
    def release_workflows(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        self._each(request, queryset, release_workflow)

    def _each(self, request: HttpRequest, queryset: Iterable[Workflow], verb: Callable[[str], str]) -> None:
        """Call ``verb`` with each workflow's name; report and log the message it returns."""
        for workflow in queryset:
            try:
                message = verb(workflow.name)
            except ValueError as exc:  # a row with an empty name is no workflow
                messages.warning(
                    request, gettext("Skipped %(name)r: %(reason)s") % {"name": workflow.name, "reason": exc}
                )
                continue
            self.log_change(request, workflow, message)
            messages.success(request, message)


# --- workers -----------------------------------------------------------------------------------


def worker_status(worker: Worker, now: datetime) -> str:
    """``stopped``, ``alive`` (heart-beating within the stale period, as :func:`alive_workers`) or ``stale``."""
    if worker.stopped_at is not None:
        return "stopped"
    if worker.heartbeat_at >= now - timedelta(seconds=stale_after_seconds()):
        return "alive"
    return "stale"


WORKER_STATUSES = {
    "alive": (_("alive"), _SUCCESS),
    "stale": (_("stale"), _ERROR),
    "stopped": (_("stopped"), _QUIET),
}


class WorkerStatusFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, Any]]:
        return [(key, label) for key, (label, _colour) in WORKER_STATUSES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Worker]) -> QuerySet[Worker] | None:
        cutoff = timezone.now() - timedelta(seconds=stale_after_seconds())
        conditions = {
            "alive": Q(stopped_at__isnull=True, heartbeat_at__gte=cutoff),
            "stale": Q(stopped_at__isnull=True, heartbeat_at__lt=cutoff),
            "stopped": Q(stopped_at__isnull=False),
        }
        condition = conditions.get(self.value() or "")
        return None if condition is None else queryset.filter(condition)


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    """The worker registry, as the workers write it: view only."""

    list_display = [
        "name", "status_badge", "hostname", "pid", "concurrency", "started_at", "heartbeat",
        "last_slot_at", "stopped_at", "jobs_done",
    ]
    list_filter = [WorkerStatusFilter]
    search_fields = ["name", "hostname"]
    ordering = ["-heartbeat_at"]
    show_full_result_count = False
    fields = [
        "name", "status_badge", "hostname", "pid", "concurrency", "started_at", "heartbeat",
        "last_slot_at", "stopped_at", "jobs_done",
    ]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    @admin.display(description=_("status"))
    def status_badge(self, worker: Worker) -> SafeString:
        label, colour = WORKER_STATUSES[worker_status(worker, timezone.now())]
        return badge(label, colour)

    @admin.display(description=_("last heartbeat"), ordering="heartbeat_at")
    def heartbeat(self, worker: Worker) -> str:
        age = ago(worker.heartbeat_at, timezone.now())
        return format_html("{}<br><small>{}</small>", when(worker.heartbeat_at), age)


# --- the dashboard -----------------------------------------------------------------------------


class EpochBucket(Func):
    """The index of the ``seconds``-long bucket a datetime falls in: ``floor(epoch seconds / seconds)``.

    Buckets are counted from the Unix epoch, as slots are, so buckets of whole slots line up
    with the slots. A chart is one ``GROUP BY`` on this, in the database (SQLite, PostgreSQL).
    """

    output_field = IntegerField()
    arity = 1

    def __init__(self, expression: Any, seconds: int) -> None:
        seconds = int(seconds)
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        self.seconds = seconds
        super().__init__(expression)

    def as_sql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        raise NotSupportedError(f"EpochBucket supports SQLite and PostgreSQL, not {connection.vendor}")

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # strftime('%s') of the text Django stores ("YYYY-MM-DD HH:MM:SS.ffffff", UTC) without
        # its fraction, which SQLite would round to the millisecond (10:14:59.9999 -> 10:15);
        # integer division floors. '%' is doubled for this template and for the backend.
        template = (
            "(CAST(strftime('%%%%s', substr(%(expressions)s, 1, 19)) AS INTEGER) / " + str(self.seconds) + ")"
        )
        return super().as_sql(compiler, connection, template=template, **extra_context)

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        template = "CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / " + str(self.seconds) + ") AS BIGINT)"
        return super().as_sql(compiler, connection, template=template, **extra_context)


#: A chart has at most this many bars: a longer span takes buckets of several slots.
MAX_BARS = 168
#: Bucket lengths that read well, in minutes (a bucket is also a whole number of slots).
NICE_MINUTES = (1, 2, 3, 5, 10, 15, 20, 30, 60, 120, 180, 240, 360, 720, 1440)
DAY_MINUTES = 24 * 60
WEEK_MINUTES = 7 * DAY_MINUTES
# The SVG's own coordinates; it scales to the page's width.
CHART_WIDTH, CHART_HEIGHT = 720, 170
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 40, 8, 10, 22


def bucket_minutes(span_minutes: int, slot_minutes: int) -> int:
    """The shortest bucket of whole slots, of a length that reads well, giving at most MAX_BARS bars."""
    for minutes in sorted({slot_minutes, *NICE_MINUTES}):
        if minutes % slot_minutes == 0 and span_minutes % minutes == 0 and span_minutes // minutes <= MAX_BARS:
            return minutes
    return span_minutes


def bucket_label(minutes: int, slot_minutes: int) -> str:
    """``15 min (one slot)``, ``1 h (4 slots)``."""
    length = (
        gettext("%(count)d min") % {"count": minutes}
        if minutes < 60 or minutes % 60
        else gettext("%(count)d h") % {"count": minutes // 60}
    )
    slots_in = minutes // slot_minutes
    count = gettext("one slot") if slots_in == 1 else gettext("%(count)d slots") % {"count": slots_in}
    return f"{length} ({count})"


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50 … at or above ``value`` (the top of a chart's scale)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if factor * step >= value:
                return factor * step
        step *= 10


def _coordinate(value: float) -> str:
    # Formatted here: a template would localize the decimal separator.
    return f"{value:.1f}"


@dataclass
class Series:
    key: str
    label: str
    total: int = 0

    @property
    def css(self) -> str:
        return f"prescient-s-{self.key}"


@dataclass
class Segment:
    css: str
    x: str
    y: str
    width: str
    height: str


@dataclass
class Bar:
    title: str
    segments: list[Segment]


@dataclass
class Tick:
    x: str
    y: str
    label: str


@dataclass
class Chart:
    """A stacked bar chart, laid out here and drawn as SVG by ``prescient/admin/chart.html``."""

    key: str
    title: str
    caption: str
    empty_text: str
    series: list[Series]
    total: int = 0
    bars: list[Bar] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = PAD_LEFT
    right: int = CHART_WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    baseline: int = CHART_HEIGHT - PAD_BOTTOM

    @property
    def legend(self) -> list[Series]:
        return [entry for entry in self.series if entry.total]

    @property
    def middle(self) -> tuple[str, str]:
        return _coordinate((self.left + self.right) / 2), _coordinate((self.top + self.baseline) / 2)


def bucket_counts(
    queryset: QuerySet[Any], field_name: str, start: datetime, minutes: int, key: str
) -> dict[tuple[int, str], int]:
    """``{(bar, value of key): count}`` for the rows of ``queryset``, in one GROUP BY.

    ``bar`` counts ``minutes``-long buckets from ``start`` (itself a bucket boundary).
    """
    seconds = minutes * 60
    first = int((start - slots.EPOCH).total_seconds()) // seconds
    rows = (
        queryset.order_by()
        .annotate(bucket=EpochBucket(field_name, seconds))
        .values("bucket", key)
        .annotate(n=Count("pk"))
    )
    return {(int(row["bucket"]) - first, row[key]): row["n"] for row in rows}


def build_chart(
    chart: Chart,
    counts: dict[tuple[int, str], int],
    start: datetime,
    minutes: int,
    bars: int,
    *,
    label_every: int,
    label_format: str,
    title_format: str,
) -> Chart:
    """Lay out ``counts`` (from :func:`bucket_counts`) as ``bars`` stacked bars from ``start``.

    An x label goes on the first bar at or after each ``label_every`` minutes of local time.
    """
    bucket = timedelta(minutes=minutes)
    for entry in chart.series:
        entry.total = sum(n for (index, key), n in counts.items() if 0 <= index < bars and key == entry.key)
    chart.total = sum(entry.total for entry in chart.series)
    heights = [sum(counts.get((index, entry.key), 0) for entry in chart.series) for index in range(bars)]
    scale = nice_ceiling(max(heights, default=0))
    plot_height = chart.baseline - chart.top
    step = (chart.right - chart.left) / bars
    gap = min(step * 0.2, 2.0)
    for index, height in enumerate(heights):
        bar_start = start + bucket * index
        local = timezone.localtime(bar_start)
        x = chart.left + step * index
        minute_of_day = local.hour * 60 + local.minute
        if minute_of_day % label_every < minutes:
            chart.x_ticks.append(
                Tick(_coordinate(x), str(chart.baseline + 15), dateformat.format(local, label_format))
            )
        if not height:
            continue
        y = float(chart.baseline)
        segments, parts = [], []
        for entry in chart.series:
            value = counts.get((index, entry.key), 0)
            if not value:
                continue
            drawn = max(value / scale * plot_height, 1.0)
            y -= drawn
            segments.append(
                Segment(
                    entry.css, _coordinate(x + gap / 2), _coordinate(y), _coordinate(step - gap), _coordinate(drawn)
                )
            )
            parts.append(f"{value} {entry.label}")
        title = "%s–%s: %s" % (
            dateformat.format(local, title_format),
            dateformat.format(timezone.localtime(bar_start + bucket), "H:i"),
            ", ".join(parts),
        )
        chart.bars.append(Bar(title, segments))
    ticks = [0, scale // 2, scale] if scale % 2 == 0 else [0, scale]
    for value in ticks:
        y = chart.baseline - value / scale * plot_height
        chart.y_ticks.append(Tick(str(chart.left - 6), _coordinate(y), str(value)))
    return chart


def dashboard_charts(now: datetime) -> list[Chart]:
    """Jobs due per slot for the next 24 hours; jobs finished per slot for the past 24 hours and 7 days."""
    slot_minutes = int(setting("SLOT_MINUTES"))
    outcomes = [Series(outcome.value, str(outcome.label).lower()) for outcome in Outcome]
    charts = []

    minutes = bucket_minutes(DAY_MINUTES, slot_minutes)
    start = slots.floor(now, minutes)
    end = start + timedelta(days=1)
    due = FutureJob.objects.filter(state=State.SCHEDULED, next_check_at__gte=start, next_check_at__lt=end)
    chart = Chart(
        "due",
        gettext("Due in the next 24 hours"),
        gettext("Scheduled jobs by due time, per %(bucket)s. Overdue jobs count under “due now”.")
        % {"bucket": bucket_label(minutes, slot_minutes)},
        gettext("No scheduled job is due in the next 24 hours."),
        [Series(State.SCHEDULED.value, gettext("scheduled"))],
    )
    counts = bucket_counts(due, "next_check_at", start, minutes, key="state")
    charts.append(
        build_chart(
            chart, counts, start, minutes, DAY_MINUTES // minutes,
            label_every=180, label_format="H:i", title_format="H:i",
        )
    )

    for key, title, span, label_every, label_format, title_format in (
        ("day", gettext("Finished in the past 24 hours"), DAY_MINUTES, 180, "H:i", "H:i"),
        ("week", gettext("Finished in the past 7 days"), WEEK_MINUTES, DAY_MINUTES, "D j", "D j, H:i"),
    ):
        minutes = bucket_minutes(span, slot_minutes)
        end = slots.floor(now, minutes) + timedelta(minutes=minutes)
        start = end - timedelta(minutes=span)
        finished = JobHistory.objects.filter(finished_at__gte=start, finished_at__lt=end)
        chart = Chart(
            key,
            title,
            gettext("Jobs that left the live table, by outcome, per %(bucket)s.")
            % {"bucket": bucket_label(minutes, slot_minutes)},
            gettext("No job finished in this period."),
            [Series(entry.key, entry.label) for entry in outcomes],
        )
        counts = bucket_counts(finished, "finished_at", start, minutes, key="outcome")
        charts.append(
            build_chart(
                chart, counts, start, minutes, span // minutes,
                label_every=label_every, label_format=label_format, title_format=title_format,
            )
        )
    return charts


def dashboard_context(site: admin.AdminSite, request: HttpRequest, now: datetime) -> dict[str, Any]:
    """What the dashboard shows; a fixed number of queries, whatever the number of jobs."""
    status = snapshot(now)
    states = [
        {
            "label": state.label,
            "count": status.states.get(state.value, 0),
            "badge": badge(state.label, STATE_COLOURS[state]),
            "url": admin_url(site, FutureJob, "changelist", state__exact=state.value),
        }
        for state in State
    ]
    oldest = None
    if status.due_now:
        job = FutureJob.objects.due(now).order_by("next_check_at", "id").first()
        if job is not None:
            oldest = {
                "job": job,
                "entity": entity_link(site, job.entity_name, job.entity_key),
                "due": when(job.next_check_at),
                "late": timesince(job.next_check_at, now) if job.next_check_at < now else "",
                "url": admin_url(site, FutureJob, "change", quote(job.pk)),
            }
    workers = [
        {
            "name": info.name,
            "host": info.hostname,
            "pid": info.pid,
            "concurrency": info.concurrency,
            "heartbeat": gettext("%(seconds)d s ago") % {"seconds": info.heartbeat_age_seconds},
            "jobs_done": info.jobs_done,
        }
        for info in status.workers
    ]
    last_slot = datetime.fromisoformat(status.last_slot_at) if status.last_slot_at else None
    return {
        "states": states,
        "total": sum(status.states.values()),
        "due_now": status.due_now,
        "due_url": admin_url(site, FutureJob, "changelist", state__exact=State.SCHEDULED.value, due="overdue"),
        "oldest": oldest,
        "workers": workers,
        "last_slot": when(last_slot) if last_slot else None,
        "workers_url": (
            admin_url(site, Worker, "changelist") if can_view(site, request, Worker) else None
        ),
        "history_url": (
            admin_url(site, JobHistory, "changelist") if can_view(site, request, JobHistory) else None
        ),
        "jobs_url": admin_url(site, FutureJob, "changelist"),
        "charts": dashboard_charts(now),
        "slot_minutes": int(setting("SLOT_MINUTES")),
        "now": when(now),
    }


from . import admin_tokens  # noqa: E402,F401
