from django.db import models


class Thing(models.Model):
    """An entity for test checks."""

    name = models.CharField(max_length=100, default="thing")
    status = models.CharField(max_length=20, default="open")

    def __str__(self) -> str:
        return self.name


class Other(models.Model):
    """A second model, for wrong-entity tests."""

    name = models.CharField(max_length=100, default="other")


class RunLog(models.Model):
    """One row per check call, written by the checks: counts runs outside the job table."""

    check_name = models.CharField(max_length=100)
    entity_key = models.CharField(max_length=100)
    pid = models.IntegerField()
    started = models.FloatField()
    ended = models.FloatField(null=True)
