"""The workflows: :class:`WorkflowAdmin`, jobs per state, pause and release (in bulk or per row).

Each cell of jobs per state is bounded (#36): counted exactly up to :data:`EXACT_UP_TO` jobs
(a count that stops there, in the list's own query: ``prescient_job_workflow``), beyond that
PostgreSQL's planner estimate, marked ``≈`` and said so under the list; other databases count
exactly. A page costs at most its rows times the states times the bound in index entries, however many
jobs a workflow has (a ``COUNT`` per cell read 2 M entries, 3.9 s at 10 M jobs). Ordered by a
state, the list is ordered by those capped counts (the workflows beyond the bound by name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import django
from django.contrib import admin, messages
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from prescient import counting
from prescient.admin.display import STATE_COLOURS, TitledListMixin, badge, when
from prescient.admin.graph import workflow_graph
from prescient.engine import verbs as services
from prescient.kinds.links import admin_url
from prescient.models import FutureJob, Workflow
from prescient.states import State

# ModelAdmin is generic in django-stubs only (subscripting it at runtime needs django_stubs_ext).
if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin[Workflow]
else:
    _AdminBase = admin.ModelAdmin


#: Jobs of a workflow in a state counted one by one, at most; beyond, the planner's estimate.
EXACT_UP_TO = counting.EXACT_COUNT_LIMIT


def _jobs_in(state: State) -> counting.CappedCount:
    """How many jobs of the outer workflow are in ``state``, up to :data:`EXACT_UP_TO` + 1
    (served by ``prescient_job_workflow``)."""
    return counting.CappedCount(FutureJob.objects.filter(workflow=OuterRef("name"), state=state), EXACT_UP_TO)


def jobs_per_state(workflow: Workflow) -> dict[State, tuple[int, bool]]:
    """``{state: (jobs, exact)}`` of ``workflow`` (annotated by :meth:`WorkflowAdmin.get_queryset`):
    a capped count above :data:`EXACT_UP_TO` becomes the planner's estimate (PostgreSQL; one
    ``EXPLAIN`` per such cell) or an exact count (elsewhere). Kept on the workflow."""
    known: dict[State, tuple[int, bool]] | None = getattr(workflow, "_prescient_jobs", None)
    if known is None:
        known = {}
        for state in State:
            count = getattr(workflow, f"jobs_{state.value}", 0) or 0
            if count > EXACT_UP_TO:
                jobs = FutureJob.objects.filter(workflow=workflow.name, state=state).using(workflow._state.db)
                known[state] = counting.beyond(jobs, EXACT_UP_TO)
            else:
                known[state] = (count, True)
        workflow._prescient_jobs = known  # type: ignore[attr-defined]
    return known


class WorkflowChangeList(ChangeList):
    """The workflows' list: :attr:`cells_estimated` when a cell of the page is an estimate (said
    under the list, ``prescient/admin/change_list.html``)."""

    cells_estimated = False

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.cells_estimated = any(
            not exact for workflow in self.result_list for _count, exact in jobs_per_state(workflow).values()
        )


def _state_column(state: State) -> Callable[[WorkflowAdmin, Workflow], str]:
    @admin.display(description=state.label, ordering=f"jobs_{state.value}")
    def column(self: WorkflowAdmin, workflow: Workflow) -> str:
        count, exact = jobs_per_state(workflow)[state]
        mark = "" if exact else format_html(
            '<abbr class="prescient-approx" title="{}">≈</abbr>',
            gettext("PostgreSQL's estimate: counted exactly up to %(bound)s") % {"bound": f"{EXACT_UP_TO:,}"},
        )
        url = admin_url(self.admin_site, FutureJob, "changelist", workflow=workflow.name, state__exact=state.value)
        if not count or url is None:
            return format_html("{}{}", mark, count)
        return format_html('{}<a href="{}">{}</a>', mark, url, count)

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
class WorkflowAdmin(TitledListMixin, _AdminBase):
    # "paused at" shows under the status: a column less, so that the graph link and the buttons
    # stay in the list's box at 1024 px (they hid behind its scroll).
    list_display = [
        "name", "status", "scheduled_jobs", "reserved_jobs", "running_jobs", "paused_jobs",
        "buried_jobs", "waiting_jobs", "graph",
    ]
    search_fields = ["name"]
    ordering = ["name"]
    show_full_result_count = False
    actions = ["pause_workflows", "release_workflows"]
    readonly_fields = [
        "name", "status", "paused_at", "scheduled_jobs", "reserved_jobs", "running_jobs", "paused_jobs",
        "buried_jobs", "waiting_jobs", "graph",
    ]
    fields = list(readonly_fields)

    scheduled_jobs = _state_column(State.SCHEDULED)
    reserved_jobs = _state_column(State.RESERVED)
    running_jobs = _state_column(State.RUNNING)
    paused_jobs = _state_column(State.PAUSED)
    buried_jobs = _state_column(State.BURIED)
    waiting_jobs = _state_column(State.WAITING)

    @admin.display(description=_("graph"))
    def graph(self, workflow: Workflow) -> str:
        opts = self.opts
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_graph", args=[quote(workflow.pk)],
                      current_app=self.admin_site.name)
        return format_html('<a href="{}">{}</a>', url, gettext("graph"))

    def graph_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The workflow's jobs and their links, drawn as SVG (see prescient.admin.graph)."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        workflow = self.get_object(request, unquote(object_id))
        if workflow is None:
            raise Http404(gettext("No workflow %(name)r.") % {"name": unquote(object_id)})
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "workflow": workflow,
            "title": gettext("Workflow %(name)s") % {"name": workflow.name},
            "graph": workflow_graph(self.admin_site, workflow.name),
            "breadcrumbs_as_list": django.VERSION >= (6, 0),  # Django 6 draws breadcrumbs as a list
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "prescient/admin/workflow_graph.html", context)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkflowChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workflow]:
        # annotate() with computed names is typed Any by the django-stubs plugin.
        queryset: QuerySet[Workflow] = super().get_queryset(request).annotate(
            **{f"jobs_{s.value}": _jobs_in(s) for s in State}
        )
        return queryset

    # Workflows appear when a job names one; pausing and releasing are the actions.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return obj is None and super().has_change_permission(request)

    @admin.display(description=_("status"), ordering="paused_at")
    def status(self, workflow: Workflow) -> SafeString:
        if workflow.is_paused:
            paused = badge(gettext("paused"), STATE_COLOURS[State.PAUSED])
            if workflow.paused_at is None:
                return paused
            return format_html("{}<br><small>{}</small>", paused, when(workflow.paused_at))
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
                paused_jobs: int = getattr(workflow, "jobs_paused", 0)
                idle = workflow.is_paused if verb == "pause" else not (workflow.is_paused or paused_jobs)
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
        graph = path("<path:object_id>/graph/", self.admin_site.admin_view(self.graph_view),
                     name=f"{opts.app_label}_{opts.model_name}_graph")
        return [*verbs, graph, *super().get_urls()]

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
        context: dict[str, Any] = {"preserved_filters": self.get_preserved_filters(request), "opts": self.opts}
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
