from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.utils import timezone

import prescient

#: How long after an order is placed its first "still unshipped?" check is due.
FIRST_CHECK_AFTER = timedelta(minutes=1)

#: The workflow of every order's "still unshipped?" reminders: pausing it in the admin's
#: Workflows page silences them all; releasing it makes the missed ones due at once.
REMINDERS = "reminders"

#: The workflow of the orders the demo's trickle places: pack, then ship (after pack).
FULFILMENT = "fulfilment"


class Order(models.Model):
    class Status(models.TextChoices):
        PLACED = "placed", "Placed"
        SHIPPED = "shipped", "Shipped"

    customer = models.CharField("customer name", max_length=100)
    created_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PLACED)
    shipped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"order {self.pk} ({self.customer})"

    def ship(self, now: datetime | None = None) -> None:
        """Mark the order shipped; its next check sees it and ends the job (outcome completed)."""
        self.status = self.Status.SHIPPED
        self.shipped_at = now or timezone.now()
        self.save(update_fields=["status", "shipped_at"])


class Notification(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=30)
    message = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.message


class Report(models.Model):
    """A report the shop writes on a schedule (a recurring schedule's check is about one row)."""

    name = models.CharField(max_length=100, unique=True)
    text = models.TextField(blank=True, default="")
    written_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


def schedule_unshipped_check(sender: type[Order], instance: Order, created: bool, **kwargs: Any) -> None:
    """post_save receiver: a new order gets its "shop.unshipped" check and its "shop.shipped"
    expectation.

    It runs inside the order's own transaction, so the order and its job are saved together.
    The check is due ``FIRST_CHECK_AFTER`` after the order was placed, rounded up to a slot, in
    the workflow ``reminders``.
    """
    if created and not kwargs.get("raw"):
        prescient.schedule(
            instance, "shop.unshipped", at=instance.created_at + FIRST_CHECK_AFTER, workflow=REMINDERS
        )
        # And the same promise as an expectation (shop/prescient_checks.py): shipped within its
        # ladder, or it escalates; shipping the order ends it "met" in the shipping transaction.
        prescient.expect(instance, "shop.shipped", start=instance.created_at)


def fulfil(order: Order, ship_after: timedelta | None) -> None:
    """Schedule ``order``'s fulfilment in the workflow ``fulfilment``: ``shop.pack`` a minute
    after it was placed, then ``shop.ship`` ``ship_after`` after it was placed, waiting for the
    packing to end (``None``: packed only, left for a person to ship from the admin)."""
    pack = prescient.schedule(order, "shop.pack", at=order.created_at + FIRST_CHECK_AFTER, workflow=FULFILMENT)
    if ship_after is not None:
        prescient.schedule(order, "shop.ship", at=order.created_at + ship_after, workflow=FULFILMENT, after=[pack])
