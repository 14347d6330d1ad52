from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import ngettext

from prescient.models import FutureJob

from .models import Notification, Order, Report


class NotificationInline(admin.TabularInline):
    model = Notification
    extra = 0
    can_delete = False
    fields = ["created_at", "kind", "message"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Order | None = None) -> bool:
        return False


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = [
        "id", "customer", "status", "created_at", "shipped_at", "notification_count", "next_check",
    ]
    list_filter = ["status"]
    search_fields = ["customer"]
    readonly_fields = ["created_at", "shipped_at", "next_check"]
    inlines = [NotificationInline]
    actions = ["mark_shipped"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Order]:
        return super().get_queryset(request).annotate(notification_count=Count("notifications"))

    @admin.display(description="notifications", ordering="notification_count")
    def notification_count(self, obj: Order) -> int:
        return obj.notification_count  # type: ignore[attr-defined]

    @admin.display(description="next check")
    def next_check(self, obj: Order) -> str:
        """When prescient checks this order next ("-" once its job has ended)."""
        if obj.pk is None:
            return "-"
        job = FutureJob.objects.for_entity(obj).filter(job_exec="shop.unshipped").first()
        if job is None:
            return "-"
        return f"{timezone.localtime(job.next_check_at):%Y-%m-%d %H:%M} ({job.state})"

    @admin.action(description="Mark selected orders shipped")
    def mark_shipped(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        count = 0
        for order in queryset.filter(status=Order.Status.PLACED):
            order.ship()
            count += 1
        self.message_user(
            request,
            ngettext("%d order marked shipped.", "%d orders marked shipped.", count) % count,
            messages.SUCCESS,
        )


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["created_at", "order", "kind", "message"]
    list_filter = ["kind"]
    date_hierarchy = "created_at"
    list_select_related = ["order"]


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    """Reports written by recurring schedules (the admin's Schedules page says when)."""

    list_display = ["name", "written_at"]
    readonly_fields = ["name", "text", "written_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the demo command creates them
