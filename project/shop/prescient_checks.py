"""The shop's prescient checks (found by prescient's autodiscovery of ``prescient_checks``)."""

from datetime import timedelta

import prescient
from prescient.models import FutureJob

from .models import Notification, Order


@prescient.check("shop.unshipped", model="shop.Order")
def unshipped(order: Order, job: FutureJob) -> timedelta | None:
    """Notify while ``order`` is not shipped, every two minutes; stop once it is."""
    if order.status == Order.Status.SHIPPED:
        return None
    Notification.objects.create(
        order=order, kind="unshipped", message=f"order {order.pk} not shipped yet"
    )
    return timedelta(minutes=2)
