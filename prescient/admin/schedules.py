"""*Schedules*: the recurring schedules, their next occurrences (UTC and local), counters, and
the actions pause, resume and run the next occurrence now (each calls the engine's verb)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from prescient import cron
from prescient.admin.display import breakable
from prescient.admin.reading import ReadListMixin
from prescient.engine import recurring
from prescient.kinds.links import admin_url
from prescient.models import JobHistory, Schedule
from prescient.wording import entity_text

# ModelAdmin is generic in django-stubs only (subscripting it at runtime needs django_stubs_ext).
if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin[Schedule]
else:
    _AdminBase = admin.ModelAdmin


@admin.register(Schedule)
class ScheduleAdmin(ReadListMixin, _AdminBase):
    list_display = ["name", "starts", "when", "next_at", "paused_at", "last_run_at", "runs", "skipped", "missed"]
    list_filter = ["declared", "catch_up"]
    search_fields = ["name", "job_exec"]
    actions = ["pause_schedules", "resume_schedules", "run_next_now"]
    readonly_fields = ["starts", "when", "upcoming", "history", "runs", "skipped", "missed", "last_run_at",
                       "next_at", "due_at", "paused_at", "created_at", "updated_at"]
    fields = ["name", "starts", "when", "catch_up", "workflow", "upcoming", "history", "last_run_at", "runs",
              "skipped", "missed", "paused_at", "declared", "created_at", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # created in code or through the API, validated there

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the page is read-only: schedules are changed in code or through the API

    def has_steer_permission(self, request: HttpRequest) -> bool:
        """Pausing, resuming and bringing forward a schedule need its change permission, as in
        the API (the page itself stays read-only)."""
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    @admin.display(description=_("starts"))
    def starts(self, obj: Schedule) -> str:
        # Broken only after a name's ".", ":" or "_": never inside a word.
        return breakable(f"{obj.job_exec} on {entity_text(obj.entity_name, obj.entity_key)}" if obj.entity_key
                         else obj.job_exec)

    @admin.display(description=_("when"))
    def when(self, obj: Schedule) -> str:
        return cron.in_words(obj.cron, obj.every_seconds, obj.timezone)

    @admin.display(description=_("next five occurrences"))
    def upcoming(self, obj: Schedule) -> str:
        zone = cron.zone(obj.timezone)
        return format_html("<ul>{}</ul>", format_html_join(
            "", "<li>{} UTC · {} {}</li>",
            ((at.strftime("%Y-%m-%d %H:%M"), at.astimezone(zone).strftime("%Y-%m-%d %H:%M"), obj.timezone)
             for at in recurring.upcoming(obj)),
        ))

    @admin.display(description=_("history"))
    def history(self, obj: Schedule) -> str:
        lookups = {"job_exec": obj.job_exec}
        if obj.entity_key:
            lookups["entity_key"] = obj.entity_key
        return format_html('<a href="{}">{}</a>', admin_url(self.admin_site, JobHistory, "changelist", **lookups),
                           _("the occurrences' finished jobs"))

    def _each(self, request: HttpRequest, queryset: QuerySet[Schedule], verb: Any, singular: str, plural: str) -> None:
        done = sum(1 for s in queryset if verb(s.name))
        self.message_user(request, ngettext(singular, plural, done) % {"count": done}, messages.SUCCESS)

    @admin.action(description=_("Pause selected schedules"), permissions=["steer"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, recurring.pause, "%(count)d schedule paused.", "%(count)d schedules paused.")

    @admin.action(description=_("Resume selected schedules"), permissions=["steer"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, recurring.resume, "%(count)d schedule resumed.", "%(count)d schedules resumed.")

    @admin.action(description=_("Run the next occurrence now"), permissions=["steer"])
    def run_next_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, recurring.run_next_now,
                   "%(count)d schedule brought forward.", "%(count)d schedules brought forward.")
