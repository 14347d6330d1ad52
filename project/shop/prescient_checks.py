"""The shop's prescient checks (found by prescient's autodiscovery of ``prescient_checks``)."""

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

import prescient
from prescient.models import FutureJob

from .models import Notification, Order, Report

#: An order unshipped for longer than this is late (minutes, at the demo's pace of one-minute slots).
LATE_AFTER = timedelta(minutes=10)


@prescient.check("shop.unshipped", model="shop.Order")
def unshipped(order: Order, job: FutureJob) -> timedelta | None:
    """Notify while ``order`` is not shipped, every two minutes; stop once it is."""
    if order.status == Order.Status.SHIPPED:
        return None
    Notification.objects.create(
        order=order, kind="unshipped", message=f"order {order.pk} not shipped yet"
    )
    return timedelta(minutes=2)


#: When an unshipped order escalates, counted from when it was placed (the demo's one-minute
#: slots make minutes of what a shop would make hours).
SHIPPING_LADDER = [timedelta(minutes=10), timedelta(minutes=25), timedelta(minutes=40)]
ESCALATION = {1: "the warehouse", 2: "the shop manager", 3: "the customer, with an apology"}


@prescient.expectation(
    "shop.shipped", model="shop.Order", met=Q(status=Order.Status.SHIPPED), ladder=SHIPPING_LADDER
)
def not_shipped(order: Order, job: FutureJob, step: int) -> None:
    """An order still unshipped at a rung of its ladder: tell the next person up. Shipping it
    ends the expectation "met"; past the last rung it ends "missed"."""
    Notification.objects.create(
        order=order, kind=f"late-{step}", message=f"order {order.pk} not shipped: tell {ESCALATION[step]}"
    )


@prescient.check("shop.pack", model="shop.Order")
def pack(order: Order, job: FutureJob) -> None:
    """The first step of an order's fulfilment (workflow ``fulfilment``): pack it. Its
    ``shop.ship`` job waits for this one to end."""
    if order.status == Order.Status.PLACED:
        Notification.objects.create(order=order, kind="packed", message=f"order {order.pk} packed")


@prescient.check("shop.ship", model="shop.Order")
def ship(order: Order, job: FutureJob) -> None:
    """The second step (after ``shop.pack``): ship the order. Its ``shop.unshipped`` reminder
    then ends ``completed`` at its next check."""
    if order.status == Order.Status.PLACED:
        order.ship()
        Notification.objects.create(order=order, kind="shipped", message=f"order {order.pk} shipped")


@prescient.check("shop.late_orders", model="shop.Report")
def late_orders(report: Report, job: FutureJob) -> None:
    """Write the "late orders" report: the orders placed more than ``LATE_AFTER`` ago and not
    shipped. Run by the recurring schedule ``shop.late-orders-daily`` (see the demo command);
    each occurrence is a job of its own, which ends here."""
    now = timezone.now()
    late = Order.objects.filter(status=Order.Status.PLACED, created_at__lt=now - LATE_AFTER).order_by("created_at")
    lines = [f"{order} placed {order.created_at:%Y-%m-%d %H:%M}" for order in late]
    report.text = "\n".join(lines) if lines else "No late orders."
    report.written_at = now
    report.save(update_fields=["text", "written_at"])
