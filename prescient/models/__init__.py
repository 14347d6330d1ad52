"""prescient's models, one module per concept; every name is importable from here
(``from prescient.models import FutureJob``), as Django finds the app's models here.

- :mod:`.jobs`: :class:`FutureJob`, the live table of pending jobs, and its QuerySet.
- :mod:`.history`: :class:`JobHistory`, one row per finished job.
- :mod:`.workflows`: :class:`Workflow`, :class:`JobLink` and :class:`ParentFailure`.
- :mod:`.workers`: :class:`Worker`, the running worker processes.
- :mod:`.tokens`: :class:`ApiToken`, the JSON API's tokens.
- :mod:`.schedules`: :class:`Schedule`, :class:`Occurrence` and :class:`CatchUp`.
- :mod:`.limits`: :class:`RateBucket`, the tokens of rates per key.

(:class:`MetricTally`, the metrics' running totals, is :mod:`prescient.tallies`'s.)
"""

from ..tallies import MetricTally
from .history import JobHistory
from .jobs import CHECKPOINT_LIMIT, FutureJob, FutureJobQuerySet
from .limits import RateBucket
from .schedules import CatchUp, Occurrence, Schedule, ScheduleQuerySet
from .tokens import ApiToken
from .workers import Worker
from .workflows import JobLink, ParentFailure, Workflow

__all__ = [
    "CHECKPOINT_LIMIT",
    "ApiToken",
    "CatchUp",
    "FutureJob",
    "FutureJobQuerySet",
    "JobHistory",
    "JobLink",
    "MetricTally",
    "Occurrence",
    "ParentFailure",
    "RateBucket",
    "Schedule",
    "ScheduleQuerySet",
    "Worker",
    "Workflow",
]
