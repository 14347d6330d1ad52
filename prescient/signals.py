"""prescient's own signals, for listeners of what happened (the article's "raise an event at
core processing and add asynchronous listeners").

``job_ended``: a job ended, whatever its kind and outcome. Sent once per job, after the commit
that wrote its history row (never for a transaction rolled back), with ``sender`` the
:class:`~prescient.models.JobHistory` class and the keyword arguments ``history`` (that row:
``job_id``, ``job_exec``, ``entity_name``, ``entity_key``, ``outcome``, ``payload``…), ``kind``
(``check``, ``expectation``, ``task``) and ``outcome``. Nothing is done when no receiver is
connected.

``expectation_met``: an expectation's job ended ``met`` (at a save, at a rung, by
``recheck()`` or run now). Sent after the commit, with ``sender`` the model class (None when
it is no longer installed) and the keyword arguments ``name`` (the expectation's), ``entity_key``,
``met_at`` (an aware datetime) and ``history``.

``expectation_missed``: an expectation reached a rung of its ladder unmet (see
:func:`prescient.expectation`). Sent by the run of that rung, after the expectation's handler
returned, with ``sender`` the model class and the keyword arguments ``name`` (the
expectation's), ``instance``, ``step`` (the rung's number, from 1) and ``job``.

Receivers are called robustly: one that raises is logged and undoes nothing. A receiver that
does slow work should hand it on (``some_task.enqueue(...)``, docs/expectations.md).
"""

from __future__ import annotations

from django.dispatch import Signal

job_ended = Signal()
expectation_met = Signal()
expectation_missed = Signal()

__all__ = ["expectation_met", "expectation_missed", "job_ended"]
