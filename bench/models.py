from django.db import models


class Item(models.Model):
    """The entity of every benchmark job: a bare row, read by primary key."""

    stamp = models.FloatField(null=True, help_text="time.time() when bench.stamp last started on it")

    def __str__(self) -> str:
        return f"item {self.pk}"


class Parcel(models.Model):
    """A row shaped as :class:`Item` whose model has an expectation (``bench.parcel``): what a
    save() of such a model costs, beside a save() of Item, whose model has none."""

    stamp = models.FloatField(null=True)

    def __str__(self) -> str:
        return f"parcel {self.pk}"
