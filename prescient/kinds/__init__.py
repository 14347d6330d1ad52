"""The kinds of job prescient runs, one module each: entity checks (:mod:`.checks`),
expectations (:mod:`.expectations`, started and ended by :mod:`.expecting`) and django.tasks
tasks (:mod:`.tasks`, read as django.tasks results by :mod:`.task_results`). A new kind is a
new module here, registered with :func:`prescient.engine.kind.register`; nothing in the engine
changes.
"""

from __future__ import annotations

import django

from prescient.engine.kind import JobKind, get_kind, register, registered_kinds

__all__ = ["JobKind", "get_kind", "register", "register_builtin", "registered_kinds"]


def register_builtin() -> None:
    """Register the kinds that ship with prescient (tasks need Django 6's django.tasks)."""
    from .checks import CheckKind
    from .expectations import ExpectationKind
    from .expecting import watch_all

    register(CheckKind())
    register(ExpectationKind())
    watch_all()
    if django.VERSION >= (6, 0):
        from .tasks import TaskKind

        register(TaskKind())
