"""prescient's own signals.

``expectation_missed``: an expectation reached a rung of its ladder unmet (see
:func:`prescient.expectation`). Sent by the run of that rung, after the expectation's handler
returned, with ``sender`` the model class and the keyword arguments ``name`` (the
expectation's), ``instance``, ``step`` (the rung's number, from 1) and ``job``. Receivers are
called robustly: one that raises is logged by Django and does not undo the rung.
"""

from __future__ import annotations

from django.dispatch import Signal

expectation_missed = Signal()

__all__ = ["expectation_missed"]
