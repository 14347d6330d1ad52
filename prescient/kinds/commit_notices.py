"""On PostgreSQL, a save of a watched model that ends nothing costs no round trip.

The triggers of :mod:`.watch_triggers` judge, at the end of each UPDATE or DELETE of a watched
table, the rows with a pending expectation, and raise a NOTICE naming a row only when there is
something to end (a job met, its row gone, a ``met`` only Python can ask). psycopg hands the
notices to this module with the statement's own answer, before the save returns; a save is
noted (``post_save``/``post_delete``) and, once its transaction commits, judged by
:mod:`.judging` on the committed state only when a trigger named its row. A save that ends
nothing (none pending, or one not met) asks nothing more of the database.

A trigger reads the jobs when the statement runs: an expectation another process started a
moment before the save is judged like any other. What a trigger cannot say is judged by asking,
never missed: a table without its current triggers (a model watched, or a ``met`` changed, since
the last ``migrate``; ``SAVE_NOTICES`` off; SQLite; psycopg2; prescient.W014 says so), a
connection opened before it listened, transactions managed by hand, a test's captured on-commit
callbacks (the commit was not the database's), more rows named than are kept.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from typing import Any

from django.db import DatabaseError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from prescient.conf import setting
from prescient.expectations import generation

from . import judging, watch_triggers
from .watch_triggers import EVERY_ROW, PREFIX

logger = logging.getLogger(__name__)

#: Rows kept per connection before it stops telling them apart (a bulk update naming many):
#: past it, every row noted is judged by asking until what was heard is settled.
MOST_HEARD = 10_000
#: How long a table's triggers, once found (or not), are trusted before they are looked for again.
TRUST_SECONDS = 300.0


class Heard:
    """The rows the triggers named on one driver connection, until a judgement takes them."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.overflowed = False

    def __call__(self, diagnostic: Any) -> None:  # psycopg's notice handler
        message = diagnostic.message_primary or ""
        if not message.startswith(PREFIX):
            return
        named = message[len(PREFIX):]
        if len(self.keys) < MOST_HEARD and not named.endswith(":" + EVERY_ROW):
            self.keys.add(named)
        else:
            self.overflowed = True

    def take(self, table: str, pk: Any) -> bool:
        """Whether the row ``pk`` of ``table`` was named (or cannot be told), forgetting it."""
        key = f"{table}:{pk}"
        if key in self.keys:
            self.keys.discard(key)
            return True
        return self.overflowed

    def settle(self) -> None:
        """Forget what was heard: the statements it came from are judged."""
        self.keys.clear()
        self.overflowed = False


#: Each psycopg connection's :class:`Heard`, registered once (a pooled connection outlives the
#: Django connection that opened it).
_heard: weakref.WeakKeyDictionary[Any, Heard] = weakref.WeakKeyDictionary()
#: Whether a model's table on an alias has its current triggers (by the registry's generation),
#: and until when that is trusted.
_found: dict[tuple[str, type[models.Model], int], tuple[bool, float]] = {}


def usable(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection`` can hear the triggers: PostgreSQL through psycopg 3."""
    return connection.vendor == "postgresql" and _psycopg3()


@functools.cache
def _psycopg3() -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def enabled() -> bool:
    """``PRESCIENT["SAVE_NOTICES"]`` (False while the setting is bad: the checks say so)."""
    try:
        return bool(setting("SAVE_NOTICES"))
    except Exception:  # a bad PRESCIENT: the system checks say so; saves are judged by asking
        return False


def listen(connection: BaseDatabaseWrapper) -> Heard | None:
    """The :class:`Heard` of ``connection``'s driver connection, registered on it the first time
    (then None: what was raised before is not known)."""
    raw = connection.connection
    if raw is None:
        return None
    heard = _heard.get(raw)
    if heard is None:
        heard = _heard[raw] = Heard()
        raw.add_notice_handler(heard)
        return None
    return heard


def on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created``: hear the triggers from a connection's first statement on."""
    raw = connection.connection
    if raw is not None and usable(connection) and raw not in _heard:
        heard = _heard[raw] = Heard()
        raw.add_notice_handler(heard)


def heard_on(connection: BaseDatabaseWrapper, model: type[models.Model]) -> Heard | None:
    """What ``connection`` heard, when ``model``'s table has its current triggers and the
    connection heard them from the start; None: ask the database (:mod:`.judging`)."""
    key = (connection.alias, model, generation())
    found = _found.get(key)
    if found is None or found[1] <= time.monotonic():
        if len(_found) > 1000:  # declarations changing all the time (tests): start afresh
            _found.clear()
        found = _found[key] = (_trusted(connection, model), time.monotonic() + TRUST_SECONDS)
    return listen(connection) if found[0] else None


def _trusted(connection: BaseDatabaseWrapper, model: type[models.Model]) -> bool:
    concrete = model._meta.concrete_model
    if not usable(connection) or not enabled() or concrete is None or not watch_triggers.fits(concrete):
        return False
    table = concrete._meta.db_table
    labels = watch_triggers.watched_tables().get(table, (concrete, []))[1]
    if model._meta.label_lower not in labels:
        return False
    try:
        return watch_triggers.installed_function(connection, table) == watch_triggers.function_name(
            connection, concrete, labels)
    except DatabaseError:
        return False


def forget(**kwargs: Any) -> None:
    """Look for every table's triggers again (after ``migrate``, or the settings changed)."""
    _found.clear()


def missing(using: str = "default") -> list[str]:
    """The watched tables on ``using`` without their current triggers (none where notices are
    not used: SQLite, psycopg2, ``SAVE_NOTICES`` off)."""
    connection = connections[using]
    if not usable(connection) or not enabled():
        return []
    return watch_triggers.missing(using)


def sync(using: str = "default") -> tuple[list[str], list[str]]:
    """What ``migrate`` does after migrating: the watched tables' triggers installed (all taken
    away with ``SAVE_NOTICES`` off); returns (tables given them, tables they were taken from)."""
    try:
        return watch_triggers.sync(using, wanted=enabled())
    finally:
        forget()


def on_post_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """``post_migrate`` (sent once per app migrated): the triggers follow the watched models."""
    if getattr(sender, "label", None) != "prescient":
        return
    try:
        sync(using)
    except DatabaseError as exc:  # e.g. no right to create triggers: saves are judged by asking
        logger.warning("save notices: could not install the triggers on %s (%s); saves of watched models "
                       "are judged by asking after each commit", using, exc)


class _Noted:
    """The rows one transaction saved or deleted, each judged once when it commits: by the
    first of its on-commit callbacks to run (one is registered per save, so a test's
    captureOnCommitCallbacks, which runs only those registered inside it, judges the saves made
    inside it, and a savepoint rolled back takes its own callbacks with it)."""

    def __init__(self, hooks: list[Any], using: str) -> None:
        self.hooks = hooks  # the connection's on-commit list this transaction registers in
        self.using = using
        self.judged: set[tuple[type[models.Model], Any]] = set()
        self.waiting = 0  # callbacks registered and not yet run

    def judge(self, model: type[models.Model], pk: Any) -> None:
        self.waiting -= 1
        connection = connections[self.using]
        # Still inside a transaction: the commit was not the database's (a test's
        # captureOnCommitCallbacks): ask, and again at the next such commit.
        committed = not connection.in_atomic_block
        if (model, pk) not in self.judged:
            heard = None
            if committed:
                self.judged.add((model, pk))
                heard = heard_on(connection, model)
            if heard is None or heard.take(model._meta.db_table, pk):
                judging.judge_safely(model._meta.label_lower, pk)
        if committed and self.waiting == 0:
            _settle(connection)  # every save of the transaction is judged: what else was named is past


def note(instance: models.Model, using: str) -> None:
    """``instance`` was saved or deleted on ``using``: judge its pending expectations once that
    transaction commits (at once in autocommit; in the transaction itself under manual
    transaction management, where nothing tells when it commits), if its table's trigger named
    it or there is no trigger to ask."""
    model, pk = type(instance), instance.pk
    if pk is None:
        return
    # Compiled once per declaration (a dict read after): a met that cannot be compiled is
    # logged at the first save, asked or not (manage.py check says it first, prescient.E032).
    judging.statement(model._meta.label_lower, using)
    connection = connections[using]
    if not connection.in_atomic_block:
        # Autocommit off (transactions managed by hand): judged now, in the transaction.
        heard = heard_on(connection, model) if connection.get_autocommit() else None
        named = heard is None or heard.take(model._meta.db_table, pk)
        _settle(connection)  # the statement has committed: whatever else was named is past
        if named:
            judging.judge_safely(model._meta.label_lower, pk)
        return
    noted = getattr(connection, "_prescient_noted", None)
    if noted is None or noted.hooks is not connection.run_on_commit:  # committed or rolled back since
        noted = _Noted(connection.run_on_commit, using)
        connection._prescient_noted = noted  # type: ignore[attr-defined]
    noted.waiting += 1
    transaction.on_commit(functools.partial(noted.judge, model, pk), using=using)


def _settle(connection: BaseDatabaseWrapper) -> None:
    """Forget what ``connection``'s triggers named so far (a raw UPDATE's rows, nobody's to
    judge): a later save of the same row would otherwise be judged once for nothing."""
    if connection.connection is not None and usable(connection):
        heard = _heard.get(connection.connection)
        if heard is not None:
            heard.settle()
