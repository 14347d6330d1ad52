"""A future job's own page: read-only fields that read more than the row (its recent errors,
the admin's log of it, earlier jobs of its check for its entity), and a button per verb.

The buttons (pause or release, run now, sleep, cancel, kill) post the job list's own actions for this
one job, so they ask what the list asks (sleep: until when; kill: why) on the same
confirmation pages, refuse what the list refuses, and say what they did in the same messages.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from prescient.admin.display import (
    OUTCOME_COLOURS,
    QUIET,
    AdminMixinBase,
    badge,
    can_view,
    error_time,
    kind_word,
    when,
)
from prescient.admin.rerun import rerun_of_html
from prescient.kinds.links import admin_url
from prescient.models import FutureJob, JobHistory
from prescient.states import State

#: History rows shown on a job's page (the full list is one link away).
HISTORY_ROWS = 10
#: The buttons of a job's page: the job list's action each posts, and its label.
VERBS = [
    ("pause_jobs", _("Pause")),
    ("release_jobs", _("Release")),
    ("run_jobs_now", _("Run now")),
    ("sleep_jobs", _("Sleep until…")),
    ("cancel_jobs", _("Cancel")),
    ("kill_jobs", _("Kill…")),
]


class JobPageMixin(AdminMixinBase):
    """For :class:`~prescient.admin.jobs.FutureJobAdmin`: its change page, with the verbs' buttons."""

    change_form_template = "prescient/admin/futurejob_change_form.html"

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST":
            # Asked before the post or the job is read: a user who may not act gets the same 403
            # whether or not job N exists (a redirect would tell which).
            if not self.has_change_permission(request):
                raise PermissionDenied
            if "action" in request.POST:
                return self.job_action(request, object_id)
        job = self.get_object(request, unquote(object_id))
        context = {**(extra_context or {}), "job_verbs": self.job_verbs(request, job)}
        return super().change_view(request, object_id, form_url, context)

    def get_fieldsets(self, request: HttpRequest, obj: FutureJob | None = None) -> Any:
        """Without the "Re-run" fieldset for a job that runs no finished job again."""
        fieldsets = super().get_fieldsets(request, obj)
        if obj is not None and obj.rerun_of is not None:
            return fieldsets
        return [(name, opts) for name, opts in fieldsets if "rerun_of_link" not in opts.get("fields", ())]

    def job_verbs(self, request: HttpRequest, job: FutureJob | None) -> list[dict[str, Any]]:
        """The buttons this user may press for ``job``: pause or release (by its state), run now,
        sleep, cancel, kill."""
        if job is None:
            return []
        actions = self.get_actions(request)  # those the user's permissions allow
        skip = "pause_jobs" if job.state == State.PAUSED else "release_jobs"
        return [
            {"action": name, "label": label, "pk": str(job.pk)}
            for name, label in VERBS
            if name in actions and name != skip
        ]

    def job_action(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Run one of the list's actions on this job alone; back to its page, or, if the job has
        ended (killed, cancelled), to its history row."""
        pk = unquote(object_id)
        queryset = self.get_queryset(request).filter(pk=pk)
        post = request.POST.copy()
        post.setlist(helpers.ACTION_CHECKBOX_NAME, [str(pk)])  # this job, whatever was posted
        post.pop("select_across", None)
        request.POST = post  # type: ignore[assignment]
        response = self.response_action(request, queryset)
        if response is not None and not isinstance(response, HttpResponseRedirect):
            return response  # a confirmation page (sleep: until when? kill: why?)
        if queryset.exists():
            return HttpResponseRedirect(request.get_full_path())
        row = JobHistory.objects.filter(job_id=pk).order_by("-id").first()
        url = None
        if row is not None and can_view(self.admin_site, request, JobHistory):
            url = admin_url(self.admin_site, JobHistory, "change", quote(row.pk))
        return HttpResponseRedirect(url or admin_url(self.admin_site, FutureJob, "changelist") or "../../")

    # --- fields of the page

    @admin.display(description=_("re-run of"))
    def rerun_of_link(self, job: FutureJob) -> str:
        """The finished job this one runs again (``prescient.rerun``), linked."""
        return rerun_of_html(self.admin_site, job)

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
        """Earlier jobs of the same check (or expectation, task) for the same entity, newest first."""
        past = JobHistory.objects.filter(
            entity_name=job.entity_name, entity_key=job.entity_key, job_exec=job.job_exec
        ).order_by("-finished_at", "-id")
        rows = list(past[:HISTORY_ROWS])
        if not rows:
            return gettext("No earlier jobs of this %(what)s for this entity.") % {"what": kind_word(job)}
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    when(row.finished_at),
                    badge(row.get_outcome_display(), OUTCOME_COLOURS.get(row.outcome, QUIET)),
                    row.run_count,
                    row.check_count,
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
                    (gettext("finished at"),), (gettext("outcome"),), (gettext("runs"),),
                    (gettext("re-checks"),), (gettext("failures"),), (gettext("reason"),),
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
        return format_html('{}<p><a href="{}">{}</a></p>', table, url, gettext("All of them in the finished jobs"))
