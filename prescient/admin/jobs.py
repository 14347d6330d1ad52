"""The job list: :class:`FutureJobAdmin`, its columns and its due filter.

Nothing here writes a job row. Every change is an action (:mod:`prescient.admin.actions`) that
calls a verb of :mod:`prescient.engine.verbs`. Change pages are read-only (a saved form would
overwrite a row the tick may be changing); their buttons post these same actions for one job
(:mod:`prescient.admin.job_page`). The dashboard, a page of this admin, lives in
:mod:`prescient.admin.dashboard`.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from prescient import limits, slots
from prescient.admin.actions import JobActionsMixin
from prescient.admin.dashboard import DashboardMixin
from prescient.admin.display import (
    QUIET,
    STATE_COLOURS,
    CheckFilter,
    ConsoleListMixin,
    WorkflowFilter,
    badge,
    duration,
    entity_cell,
    fieldset_names,
    when,
)
from prescient.admin.graph import LinksMixin
from prescient.admin.job_page import JobPageMixin
from prescient.checks import get_check
from prescient.conf import setting
from prescient.engine.kind import get_kind
from prescient.exceptions import PrescientError, UnknownCheck
from prescient.models import FutureJob
from prescient.states import State

# ModelAdmin is generic in django-stubs only (subscripting it at runtime needs django_stubs_ext).
if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin[FutureJob]
else:
    _AdminBase = admin.ModelAdmin

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


class DueFilter(admin.SimpleListFilter):
    """When a job is due, relative to now and the current slot.

    *Overdue*: its time has passed and no run is in flight. *This slot*: due by the end of the
    current slot. *Today*: later today (local time). *Later*: from tomorrow on.
    """

    title = _("due")
    parameter_name = "due"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, Any]]:
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


@admin.register(FutureJob)
class FutureJobAdmin(JobActionsMixin, DashboardMixin, JobPageMixin, LinksMixin, ConsoleListMixin, _AdminBase):
    """The live jobs; its ``dashboard/`` page comes with :class:`DashboardMixin`, its own page
    (with a button per verb) with :class:`JobPageMixin`."""

    list_display = [
        "entity", "check_name", "state_badge", "next_check", "checks_used", "failure_count", "workflow",
    ]
    # The entity cell may hold a link of its own; the check links to the job.
    list_display_links = ["check_name"]
    list_filter = ["state", DueFilter, CheckFilter, WorkflowFilter]
    # Exact matches only (see search_entities): a partial key ("1") would read a large table.
    search_fields = ["=entity_key", "=workflow"]
    date_hierarchy = "next_check_at"
    ordering = ["next_check_at", "id"]
    show_full_result_count = False
    fieldsets = [
        (None, {"fields": ["entity", "job_exec", "state_badge", "last_state", "next_check"]}),
        (_("Workflow"), {"fields": ["workflow", "workflow_links"]}),
        (_("Counters"), {"fields": ["checks_used", "run_count", "failure_count", "run_time"]}),
        (_("Run in flight"), {"fields": ["reserved_at", "reserved_by", "end_requested", "end_reason"]}),
        (_("Errors"), {"fields": ["last_error", "recent_errors_table"]}),
        (_("Dates"), {"fields": ["first_check_at", "created_at"]}),
        (_("Re-run"), {"fields": ["rerun_of_link"]}),
        (_("Task (django.tasks)"), {"fields": ["queue", "priority", "payload"], "classes": ["collapse"]}),
        (_("Limits"), {"fields": ["limit_key", "rate_key"], "classes": ["collapse"]}),
        (_("History"), {"fields": ["admin_log", "history_table"]}),
    ]
    readonly_fields = fieldset_names(fieldsets)

    # All changes go through the actions: no adding, deleting or saving a job's form.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: FutureJob | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: FutureJob | None = None) -> bool:
        # Without an object this gates the actions; a job's own page is view-only.
        return obj is None and super().has_change_permission(request)

    # --- columns and fields

    @admin.display(description=_("entity"), ordering="entity_key")
    def entity(self, job: FutureJob) -> str:
        return entity_cell(self.admin_site, job)

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, job: FutureJob) -> SafeString:
        return badge(job.get_state_display(), STATE_COLOURS.get(job.state, QUIET))

    @admin.display(description=_("next check"), ordering="next_check_at")
    def next_check(self, job: FutureJob) -> str:
        now = timezone.now()
        if job.in_flight:
            if job.reserved_at is None:
                return when(job.next_check_at)
            running = gettext("run in flight for %(time)s") % {"time": timesince(job.reserved_at, now)}
            return format_html("{}<br><small>{}</small>", when(job.next_check_at), running)
        if job.next_check_at < now:
            if job.state == State.PAUSED:  # not overdue: it waits for a person to release it
                return format_html('{}<br><small class="quiet">{}</small>', when(job.next_check_at), gettext("paused"))
            held = limits.holding([job], now, now).get(job.pk) if job.limit_key or job.rate_key else None
            if held:  # not overdue either: a limit per key holds it back (prescient.limits)
                return format_html('{}<br><small class="quiet">{}</small>', when(job.next_check_at), held)
            late = gettext("overdue by %(time)s") % {"time": timesince(job.next_check_at, now)}
            return format_html(
                '{}<br><small style="color:var(--error-fg, #ba2121)">{}</small>', when(job.next_check_at), late
            )
        return when(job.next_check_at)

    @admin.display(description=_("checks used / max"), ordering="check_count")
    def checks_used(self, job: FutureJob) -> str:
        try:
            progress = get_kind(job.kind).progress(job)
        except PrescientError:  # a kind no code registers any more: its counters
            progress = None
        return progress or f"{job.check_count} / {checks_allowed(job.job_exec)}"

    @admin.display(description=_("run time"))
    def run_time(self, job: FutureJob) -> str:
        """Time spent in the check so far, over all of the job's runs."""
        return duration(job.total_run_seconds)
