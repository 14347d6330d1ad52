"""*Finished jobs*: :class:`JobHistoryAdmin`, one read-only row per job that left the live table.

Its one action, and the *Run again* button of a row's page, run finished jobs again
(:mod:`prescient.admin.rerun`). Its search finds an entity or a workflow exactly, as the job
list's does, and with a prefix the text of an error (``error:carrier down``) or an exception class
(``exception:TimeoutError``): :func:`search_errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from prescient.admin.display import (
    OUTCOME_COLOURS,
    QUIET,
    CheckFilter,
    ConsoleListMixin,
    badge,
    duration,
    entity_cell,
    fieldset_names,
    when,
)
from prescient.admin.graph import LinksMixin
from prescient.admin.rerun import RerunMixin
from prescient.models import JobHistory
from prescient.queries import history_with_error, history_with_exception

#: Search prefixes: the rest of the term is a part of the error's text, or an exception class.
ERROR_PREFIX = "error:"
EXCEPTION_PREFIX = "exception:"


def search_errors(queryset: QuerySet[JobHistory], term: str) -> QuerySet[JobHistory] | None:
    """Rows whose error contains the text after ``error:`` (in any case), or whose exception class
    is the one after ``exception:`` (``builtins.TimeoutError``, or by its last parts:
    ``TimeoutError``); None for a term with neither prefix. The matching is the API's
    (``GET history?error=&exception=``): :mod:`prescient.queries`.
    """
    term = term.strip()
    lowered = term.lower()
    if lowered.startswith(ERROR_PREFIX):
        return history_with_error(queryset, term[len(ERROR_PREFIX):])
    if lowered.startswith(EXCEPTION_PREFIX):
        return history_with_exception(queryset, term[len(EXCEPTION_PREFIX):])
    return None


# ModelAdmin is generic in django-stubs only (subscripting it at runtime needs django_stubs_ext).
if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin[JobHistory]
else:
    _AdminBase = admin.ModelAdmin


@admin.register(JobHistory)
class JobHistoryAdmin(RerunMixin, LinksMixin, ConsoleListMixin, _AdminBase):
    # Few columns, so that the list fits a 1400 px window beside the admin's sidebars: re-checks
    # and failures go under the checks run, the time per run under the run time, the lifetime
    # under the end (the row's page has each).
    list_display = [
        "check_name", "entity", "outcome_badge", "checks", "runs", "finished", "workflow",
    ]
    list_filter = ["outcome", CheckFilter]
    search_fields = ["=entity_key", "=workflow"]
    search_help_text = _(
        "An entity key (42 or shop.order:42) or a workflow name, exactly; error:text for a part of the "
        "error's text; exception:Name for an exception class (TimeoutError or builtins.TimeoutError)."
    )
    date_hierarchy = "finished_at"
    actions = ["rerun_jobs"]
    show_full_result_count = False
    fieldsets = [
        (None, {"fields": ["entity", "job_exec", "outcome_badge", "reason", "last_error", "exception_class_path"]}),
        (_("Traceback"), {"fields": ["traceback"], "classes": ["collapse"]}),
        (_("Workflow"), {"fields": ["workflow", "workflow_links"]}),
        (_("Counters"), {"fields": ["checks_run", "rechecks", "failure_count", "run_time", "time_per_run"]}),
        (_("Dates"), {"fields": ["created_at", "first_check_at", "asked_check_at", "finished_at", "lifetime"]}),
        (_("Job"), {"fields": ["job_id", "rerun_of_link", "reruns"]}),
        (
            _("Task (django.tasks)"),
            {"fields": ["queue", "priority", "payload", "return_value", "errors"], "classes": ["collapse"]},
        ),
    ]
    readonly_fields = fieldset_names(fieldsets)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[JobHistory], search_term: str
    ) -> tuple[QuerySet[JobHistory], bool]:
        found = search_errors(queryset, search_term)
        if found is not None:
            return found, False
        results: tuple[QuerySet[JobHistory], bool] = super().get_search_results(request, queryset, search_term)
        return results

    # History is a record: nobody adds, edits or deletes it here.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: JobHistory | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: JobHistory | None = None) -> bool:
        return False

    @admin.display(description=_("entity"), ordering="entity_key")
    def entity(self, row: JobHistory) -> str:
        return entity_cell(self.admin_site, row)

    @admin.display(description=_("return value"))
    def return_value(self, row: JobHistory) -> str:
        payload = row.payload if isinstance(row.payload, dict) else {}
        return repr(payload["return_value"]) if "return_value" in payload else "-"

    @admin.display(description=_("outcome"), ordering="outcome")
    def outcome_badge(self, row: JobHistory) -> SafeString:
        return badge(row.get_outcome_display(), OUTCOME_COLOURS.get(row.outcome, QUIET))

    @admin.display(description=_("run time"), ordering="total_run_seconds")
    def run_time(self, row: JobHistory) -> str:
        """Time spent in the check, over all of the job's runs."""
        return duration(row.total_run_seconds)

    @admin.display(description=_("checks run"), ordering="run_count")
    def checks(self, row: JobHistory) -> str:
        """How many times its check ran (a job that ran once: 1), and under it the re-checks and
        failed runs among them (if any). ``check_count`` alone counts re-checks only: a job
        done at its first run has 0 of them, which read as "checks 0"."""
        notes = []
        if row.check_count:
            notes.append(
                ngettext("%(count)d re-check", "%(count)d re-checks", row.check_count) % {"count": row.check_count}
            )
        if row.failure_count:
            notes.append(
                ngettext("%(count)d failure", "%(count)d failures", row.failure_count) % {"count": row.failure_count}
            )
        if not notes:
            return str(row.run_count)
        return format_html(
            '{}<br><small class="nowrap">{}</small>', row.run_count,
            format_html_join(mark_safe("<br>"), "{}", ((note,) for note in notes)),
        )

    @admin.display(description=_("checks run"))
    def checks_run(self, row: JobHistory) -> int:
        """Times its check ran (its runs), the first one included."""
        return row.run_count

    @admin.display(description=_("re-checks"))
    def rechecks(self, row: JobHistory) -> int:
        """Times its check asked to be checked again (re-scheduled), out of its maximum."""
        return row.check_count

    @admin.display(description=_("run time"), ordering="total_run_seconds")
    def runs(self, row: JobHistory) -> str:
        """The run time, and under it the time per run."""
        if not row.run_count:
            return self.run_time(row)
        each = gettext("%(time)s each") % {"time": self.time_per_run(row)}
        return format_html(
            '<span class="nowrap">{}</span><br><small class="nowrap">{}</small>', self.run_time(row), each
        )

    @admin.display(description=_("finished"), ordering="finished_at")
    def finished(self, row: JobHistory) -> str:
        """When the job ended, and under it how long it lived."""
        lived = gettext("after %(time)s") % {"time": self.lifetime(row)}
        return format_html("{}<br><small>{}</small>", when(row.finished_at), lived)

    @admin.display(description=_("per run"))
    def time_per_run(self, row: JobHistory) -> str:
        return duration(row.total_run_seconds / row.run_count) if row.run_count else "-"

    @admin.display(description=_("lifetime"))
    def lifetime(self, row: JobHistory) -> str:
        """From the job's creation to its end."""
        return duration((row.finished_at - row.created_at).total_seconds())
