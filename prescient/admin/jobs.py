"""The job list: :class:`FutureJobAdmin`, its due filter and its actions.

Nothing here writes a job row. Every change is an action that calls a verb of
:mod:`prescient.engine.verbs`, one job at a time, and reports per job what it did or why it refused.
Change pages are read-only (a saved form would overwrite a row the tick may be changing); their
buttons post these same actions for one job (:mod:`prescient.admin.job_page`).
The dashboard, a page of this admin, lives in :mod:`prescient.admin.dashboard`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, time, timedelta
from typing import TYPE_CHECKING, Any

import django
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from prescient import slots
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
from prescient.admin.sleep import sleep_jobs
from prescient.checks import get_check
from prescient.conf import setting
from prescient.engine import verbs as services
from prescient.exceptions import InvalidTime, InvalidTransition, UnknownCheck
from prescient.models import FutureJob
from prescient.states import State

# ModelAdmin is generic in django-stubs only (subscripting it at runtime needs django_stubs_ext).
if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin[FutureJob]
else:
    _AdminBase = admin.ModelAdmin

#: Per action, at most this many "skipped" messages; the rest are counted in one more message.
MAX_SKIP_MESSAGES = 10
#: Jobs listed on the kill confirmation page.
KILL_PREVIEW = 50


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


class KillForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("Kept in each job's history row."),
    )


@admin.register(FutureJob)
class FutureJobAdmin(DashboardMixin, JobPageMixin, LinksMixin, ConsoleListMixin, _AdminBase):
    """The live jobs; its ``dashboard/`` page comes with :class:`DashboardMixin`, its own page
    (with a button per verb) with :class:`JobPageMixin`."""

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
    actions = ["pause_jobs", "release_jobs", "run_jobs_now", sleep_jobs, "kill_jobs"]
    fieldsets = [
        (None, {"fields": ["entity", "job_exec", "state_badge", "last_state", "next_check"]}),
        (_("Workflow"), {"fields": ["workflow", "workflow_links"]}),
        (_("Counters"), {"fields": ["checks_used", "run_count", "failure_count", "run_time"]}),
        (_("Run in flight"), {"fields": ["reserved_at", "reserved_by", "end_requested", "end_reason"]}),
        (_("Errors"), {"fields": ["last_error", "recent_errors_table"]}),
        (_("Dates"), {"fields": ["first_check_at", "created_at"]}),
        (_("Task (django.tasks)"), {"fields": ["queue", "priority", "payload"], "classes": ["collapse"]}),
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
            except (InvalidTransition, InvalidTime, services.JobNotFound) as exc:
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
            "title": ngettext("Kill a job", "Kill %(count)d jobs", total) % {"count": total},
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
