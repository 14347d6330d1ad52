"""Running finished jobs again from the admin (``prescient.rerun``): the history list's action,
the *Run again* button of a history row's page, and the links between a row and its re-runs.

Nothing here writes a job row: each calls the verb, one row at a time, and says what it created
or why it refused. Running a job again creates one, so it takes the permission to add jobs.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from prescient.admin.display import AdminMixinBase, can_view
from prescient.engine import verbs
from prescient.exceptions import PrescientError
from prescient.kinds.links import admin_url
from prescient.models import FutureJob, JobHistory

#: Re-runs listed on a row's page (newest first).
RERUN_ROWS = 10
#: Per action, at most this many "refused" messages; the rest are counted in one more message.
MAX_REFUSALS = 10


def _row_text(row: JobHistory) -> str:
    return gettext("finished job %(id)s (%(check)s for %(name)s#%(key)s)") % {
        "id": row.pk, "check": row.job_exec, "name": row.entity_name, "key": row.entity_key,
    }


def rerun_of_html(site: admin.AdminSite, row: JobHistory | FutureJob) -> str:
    """The finished job that ``row`` runs (or ran) again, linked; "-" if none."""
    if row.rerun_of is None:
        return "-"
    url = admin_url(site, JobHistory, "change", quote(row.rerun_of))
    text = gettext("finished job %(id)s") % {"id": row.rerun_of}
    return format_html('<a href="{}">{}</a>', url, text) if url else text


class RerunMixin(AdminMixinBase):
    """For :class:`~prescient.admin.history.JobHistoryAdmin`: re-runs and their links."""

    change_form_template = "prescient/admin/jobhistory_change_form.html"

    def has_rerun_permission(self, request: HttpRequest) -> bool:
        """Running a job again creates one: it takes the permission to add one."""
        return bool(request.user.has_perm("prescient.add_futurejob"))

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta
        rerun = path(
            "<path:object_id>/rerun/", self.admin_site.admin_view(require_POST(self.rerun_view)),
            name=f"{opts.app_label}_{opts.model_name}_rerun",
        )
        return [rerun, *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "can_rerun": self.has_rerun_permission(request)}
        return super().change_view(request, object_id, form_url, context)

    def rerun_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The *Run again* button: one row run again; to the new job's page, or back with why not."""
        if not self.has_rerun_permission(request):  # before the row is read: 403 whether or not it exists
            raise PermissionDenied
        row = self.get_queryset(request).filter(pk=unquote(object_id)).first()
        if row is None:
            raise Http404
        job = self._rerun_one(request, row)
        url = None
        if job is not None and can_view(self.admin_site, request, FutureJob):
            url = admin_url(self.admin_site, FutureJob, "change", quote(job.pk))
        return HttpResponseRedirect(url or admin_url(self.admin_site, JobHistory, "change", quote(row.pk)) or "../")

    def _rerun_one(self, request: HttpRequest, row: JobHistory) -> FutureJob | None:
        try:
            job = verbs.rerun(row)
        except PrescientError as exc:
            messages.error(request, str(exc))
            return None
        self.log_change(request, row, gettext("Run again as job %(id)s.") % {"id": job.pk})
        messages.success(
            request, gettext("Created job %(id)s from %(row)s.") % {"id": job.pk, "row": _row_text(row)}
        )
        return job

    @admin.action(description=_("Run selected jobs again"), permissions=["rerun"])
    def rerun_jobs(self, request: HttpRequest, queryset: QuerySet[JobHistory]) -> None:
        """A new live job for each row; a row refused (a live job of its check and entity, its
        check gone, an expectation) is named with why."""
        created: list[str] = []
        refused = 0
        for row in queryset.order_by("pk"):
            try:
                job = verbs.rerun(row)
            except PrescientError as exc:
                refused += 1
                if refused <= MAX_REFUSALS:
                    messages.warning(request, str(exc))
                continue
            self.log_change(request, row, gettext("Run again as job %(id)s.") % {"id": job.pk})
            created.append(str(job.pk))
        if refused > MAX_REFUSALS:
            more = refused - MAX_REFUSALS
            messages.warning(
                request,
                ngettext("…and %(count)d more refused.", "…and %(count)d more refused.", more) % {"count": more},
            )
        if created:
            messages.success(
                request,
                ngettext("Created %(count)d job: %(ids)s.", "Created %(count)d jobs: %(ids)s.", len(created))
                % {"count": len(created), "ids": ", ".join(created)},
            )

    @admin.display(description=_("re-run of"))
    def rerun_of_link(self, row: JobHistory) -> str:
        return rerun_of_html(self.admin_site, row)

    @admin.display(description=_("run again as"))
    def reruns(self, row: JobHistory) -> str:
        """The jobs that ran this one again: the live one (if any), then finished ones, newest first."""
        items: list[tuple[str, str]] = []
        live = FutureJob.objects.filter(rerun_of=row.pk).values_list("pk", flat=True).first()
        if live is not None:
            url = admin_url(self.admin_site, FutureJob, "change", quote(live)) or ""
            items.append((url, gettext("live job %(id)s") % {"id": live}))
        done = JobHistory.objects.filter(rerun_of=row.pk).order_by("-id")[:RERUN_ROWS]
        for pk, outcome in done.values_list("pk", "outcome"):
            url = admin_url(self.admin_site, JobHistory, "change", quote(pk)) or ""
            items.append((url, gettext("finished job %(id)s (%(outcome)s)") % {"id": pk, "outcome": outcome}))
        if not items:
            return gettext("Not run again.")
        return format_html_join(", ", '<a href="{}">{}</a>', items)
