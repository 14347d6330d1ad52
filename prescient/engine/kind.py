"""What the engine asks of a kind of job, and the registry of kinds.

Every job row names its kind (the ``kind`` column). The sweep, the worker, the rescuer and the
admin look the kind up here and call it; none of them asks "is this a task?".
A kind answers, for its jobs:

- :meth:`JobKind.definition`: the registered :class:`~prescient.checks.Check` that carries
  the job's timeout, retries and horizon (raises a PrescientError when it is unknown);
- :meth:`JobKind.prepare`: what a batch needs loaded in bulk before it runs (checks: their
  entities), as a context per job id;
- :meth:`JobKind.run`: one job under its timeout, and what the result means (a
  :class:`~prescient.engine.decisions.Decision`);
- :meth:`JobKind.after_failed_run` / :meth:`JobKind.after_lost_run`: what else follows a run
  that failed outside its own code, or whose worker was lost;
- :meth:`JobKind.describe` / :meth:`JobKind.describe_html`: the "entity" cell of the admin
  (the API gives the entity's model and key as they are);
- :meth:`JobKind.rerun_job`: the new job that runs a finished one again (``prescient.rerun``);
- :meth:`JobKind.system_checks`: its own validation in ``manage.py check``.

The built-in kinds live in :mod:`prescient.kinds` and register themselves when the app is
ready. Oban's ``Oban.Worker`` callbacks and River's ``WorkUnitFactory`` are the models.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.checks import CheckMessage
from django.utils.html import format_html

from prescient.exceptions import PrescientError, RerunRefused
from prescient.wording import entity_text

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite

    from prescient.checks import Check
    from prescient.models import FutureJob, JobHistory

    from .decisions import Decision

class UnknownKind(PrescientError, LookupError):
    """A job row names a kind that no code registered."""

    def __init__(self, name: object) -> None:
        self.name = name
        super().__init__(f"Unknown job kind {name!r}: no installed code registers it")


class JobKind:
    """The protocol every kind implements; the defaults suit a kind with nothing special."""

    #: Stored in the ``kind`` column of its jobs and their history rows.
    name: ClassVar[str] = ""
    #: Shown in the admin and the API.
    verbose_name: ClassVar[str] = ""

    def definition(self, job: FutureJob | JobHistory) -> Check:
        """The registered definition of ``job`` (its timeout, retries, horizon)."""
        raise NotImplementedError

    def prepare(self, jobs: Sequence[FutureJob]) -> dict[int, Any]:
        """What each of ``jobs`` needs to run, loaded in bulk, by job id (absent: nothing)."""
        return {}

    def run(self, job: FutureJob, context: Any, now: datetime) -> Decision:
        """Run one claimed job under its timeout and decide what follows."""
        raise NotImplementedError

    def timeout(self, job: FutureJob) -> float:
        """Seconds one run of ``job`` may take (0 when its definition is unknown)."""
        try:
            return self.definition(job).timeout
        except PrescientError:
            return 0.0

    def after_failed_run(self, decision: Decision, now: datetime) -> None:
        """A run failed outside the job's own code (its process died, or was killed)."""

    def after_lost_run(self, job: FutureJob, now: datetime) -> None:
        """A claim was reclaimed from a lost worker: that attempt counts."""

    def rerun_job(self, row: JobHistory, now: datetime, *, paused: bool) -> FutureJob:
        """A new job (unsaved) that runs the finished job ``row`` again, due ``now`` (``paused``:
        its workflow is). Raises a PrescientError saying why when it cannot be; this default
        refuses (see :func:`prescient.engine.rerun.rerun`)."""
        raise RerunRefused(row.pk, f"a {self.verbose_name or self.name} cannot be run again")

    def describe(self, row: FutureJob | JobHistory) -> str:
        """The "entity" cell as plain text."""
        return entity_text(row.entity_name, row.entity_key)

    def describe_html(self, row: FutureJob | JobHistory, site: AdminSite) -> str:
        """The "entity" cell of the admin (safe HTML)."""
        return format_html("{}", self.describe(row))

    def progress(self, job: FutureJob) -> str | None:
        """How far a pending job has come, for the admin's "checks used" cell, when the check
        counters do not say it (an expectation: its rung); None: the counters."""
        return None

    def ladder(self, row: FutureJob | JobHistory) -> dict[str, Any] | None:
        """The kind's own fields of a job or history entry for the API (an expectation: its
        rungs, step and met_at); None when it has none."""
        return None

    def system_checks(self) -> list[CheckMessage]:
        """Problems with this kind's registrations or settings, for ``manage.py check``."""
        return []


_kinds: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    """Make ``kind`` known under its name (registering the same name again replaces it)."""
    if not kind.name:
        raise ValueError(f"{type(kind).__name__} has no name")
    _kinds[kind.name] = kind
    return kind


def get_kind(name: str) -> JobKind:
    """The kind registered as ``name``; :class:`UnknownKind` otherwise."""
    try:
        return _kinds[name]
    except KeyError:
        raise UnknownKind(name) from None


def registered_kinds() -> Iterator[JobKind]:
    """Every registered kind, by name."""
    for name in sorted(_kinds):
        yield _kinds[name]
