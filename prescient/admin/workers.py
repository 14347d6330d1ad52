"""The worker registry: :class:`WorkerAdmin`, alive, stale or stopped, view only."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from prescient.admin.display import ERROR, QUIET, SUCCESS, TitledListMixin, ago, badge, breakable, when
from prescient.conf import stale_after_seconds
from prescient.models import Worker

# ModelAdmin is generic in django-stubs only (subscripting it at runtime needs django_stubs_ext).
if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin[Worker]
else:
    _AdminBase = admin.ModelAdmin


def worker_status(worker: Worker, now: datetime) -> str:
    """``stopped``, ``alive`` (heart-beating within the stale period, as :func:`alive_workers`) or ``stale``."""
    if worker.stopped_at is not None:
        return "stopped"
    if worker.heartbeat_at >= now - timedelta(seconds=stale_after_seconds()):
        return "alive"
    return "stale"


WORKER_STATUSES = {
    "alive": (_("alive"), SUCCESS),
    "stale": (_("stale"), ERROR),
    "stopped": (_("stopped"), QUIET),
}


class WorkerStatusFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, Any]]:
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
class WorkerAdmin(TitledListMixin, _AdminBase):
    """The worker registry, as the workers write it: view only."""

    # The pid shows beside the host and the stop time under the status: two columns less, so that
    # the last ones (last heartbeat, last slot, jobs done) stay in the list's box at 1344 px.
    list_display = [
        "worker_name", "status_badge", "host", "concurrency", "started_at", "heartbeat", "last_slot_at", "jobs_done",
    ]
    list_filter = [WorkerStatusFilter]
    search_fields = ["name", "hostname"]
    ordering = ["-heartbeat_at"]
    show_full_result_count = False
    readonly_fields = [
        "name", "status_badge", "hostname", "pid", "concurrency", "started_at", "heartbeat",
        "last_slot_at", "stopped_at", "jobs_done",
    ]
    fields = list(readonly_fields)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    # A worker's name and host break after their ":" and ".", never inside a part: with no break
    # at all they widened the table until its last columns hid (at 1344 and 1600 px).
    @admin.display(description=_("name"), ordering="name")
    def worker_name(self, worker: Worker) -> SafeString:
        return breakable(worker.name)

    @admin.display(description=_("host"), ordering="hostname")
    def host(self, worker: Worker) -> SafeString:
        return format_html("{} <small>({})</small>", breakable(worker.hostname), worker.pid)

    @admin.display(description=_("status"))
    def status_badge(self, worker: Worker) -> SafeString:
        label, colour = WORKER_STATUSES[worker_status(worker, timezone.now())]
        if worker.stopped_at is None:
            return badge(label, colour)
        return format_html("{}<br><small>{}</small>", badge(label, colour), when(worker.stopped_at))

    @admin.display(description=_("last heartbeat"), ordering="heartbeat_at")
    def heartbeat(self, worker: Worker) -> str:
        age = ago(worker.heartbeat_at, timezone.now())
        return format_html("{}<br><small>{}</small>", when(worker.heartbeat_at), age)
