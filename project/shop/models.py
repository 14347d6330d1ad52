from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.utils import timezone

import prescient

#: How long after an order is placed its first "still unshipped?" check is due.
FIRST_CHECK_AFTER = timedelta(minutes=1)


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
    """post_save receiver: a new order gets its "shop.unshipped" check.

    It runs inside the order's own transaction, so the order and its job are saved together.
    The check is due ``FIRST_CHECK_AFTER`` after the order was placed, rounded up to a slot.
    """
    if created and not kwargs.get("raw"):
        prescient.schedule(instance, "shop.unshipped", at=instance.created_at + FIRST_CHECK_AFTER)
