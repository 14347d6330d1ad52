"""Many rows in one short statement: the writes of a sweep and of bulk scheduling.

Django's ``bulk_update`` builds a ``CASE WHEN pk = … THEN …`` expression for every field and
row; for a batch of a hundred jobs, compiling it cost more than everything else a tick did.
And a statement with one placeholder per value is slow to send with psycopg's client-side
binding (Django's default): the query text is parsed anew at every call. So on PostgreSQL
each column travels as one array (``unnest(%s::type[], …)``) in a statement whose text never
changes; elsewhere the rows are sent with ``executemany`` or one multi-row ``VALUES``.

Values are prepared by each field (``get_db_prep_save``), so every field type, present or
added later, is written the way the ORM would write it; only a few plain field classes take
a short cut that gives the same result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from django.db import connection, models
from django.db.models.lookups import Lookup

if TYPE_CHECKING:
    Field: TypeAlias = models.Field[Any, Any]
else:
    Field = models.Field
Converter = Callable[[Any], Any]


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


def quote_column(field: Field) -> str:
    """The quoted column of ``field``: always a concrete field here, which has a column."""
    return _qn(cast(str, field.column))


def _arrays() -> bool:
    return connection.vendor == "postgresql"


# --- values ------------------------------------------------------------------------------------

_NONE = type(None)
_TEXT: frozenset[type] = frozenset({str, _NONE})
_INT: frozenset[type] = frozenset({int, _NONE})
#: Field classes (exactly these, not subclasses) and the value types their
#: ``get_db_prep_save`` gives back unchanged on PostgreSQL, but for wrappers psycopg does not
#: need in these statements (every placeholder is cast to the column's type).
_AS_IS: dict[type[Field], frozenset[type]] = {
    models.CharField: _TEXT, models.TextField: _TEXT,
    models.IntegerField: _INT, models.PositiveIntegerField: _INT, models.BigIntegerField: _INT,
    models.PositiveBigIntegerField: _INT, models.SmallIntegerField: _INT,
    models.PositiveSmallIntegerField: _INT, models.AutoField: _INT, models.BigAutoField: _INT,
    models.FloatField: frozenset({float, _NONE}), models.BooleanField: frozenset({bool, _NONE}),
}


def _converter(field: Field) -> Converter:
    """``value -> database value`` for ``field`` on the current connection."""
    prep_save = field.get_db_prep_save
    as_is = _AS_IS.get(type(field))
    if as_is is not None:  # the same on SQLite: these fields' prep_save returns such values as they are
        return lambda value: value if type(value) in as_is else prep_save(value, connection)
    if connection.vendor != "postgresql":
        return lambda value: prep_save(value, connection)
    if type(field) is models.DateTimeField:
        # An aware datetime is written as ISO 8601 text with its offset (the statement casts
        # it), exactly the instant Django would write: psycopg formats datetimes five times
        # slower than isoformat(). None is NULL.
        return lambda value: (
            value.isoformat() if type(value) is datetime and value.tzinfo is not None
            else None if value is None else prep_save(value, connection)
        )
    return lambda value: prep_save(value, connection)


def _reads_attribute(field: Field) -> bool:
    """Whether ``field.pre_save(obj, add=True)`` is only ``getattr(obj, field.attname)``."""
    if type(field).pre_save is Field.pre_save:
        return True
    if isinstance(field, models.DateField) and type(field) in (models.DateField, models.DateTimeField):
        return not (field.auto_now or field.auto_now_add)
    return False


Plan: TypeAlias = tuple[list[tuple[Converter, str, Field, bool]], list[tuple[Converter, str]], bool]
_plans: dict[tuple[str, int], tuple[Sequence[Field], Plan]] = {}


def _plan(fields: Sequence[Field]) -> Plan:
    """Per field: its converter, attribute name, the field, whether ``pre_save`` only reads the
    attribute; then the (converter, name) pairs, and whether every field only reads it."""
    key = (connection.vendor, id(fields))
    found = _plans.get(key)
    if found is None or found[0] is not fields:
        if len(_plans) > 200:
            _plans.clear()
        steps = [(_converter(f), f.attname, f, _reads_attribute(f)) for f in fields]
        found = _plans[key] = (fields, (steps, [(c, name) for c, name, _, _ in steps], all(s[3] for s in steps)))
    return found[1]


def prep_all(objs: Iterable[Any], fields: Sequence[Field], *, add: bool = False) -> list[list[Any]]:
    """The values of ``fields`` of each of ``objs`` as the database takes them.

    ``add``: for an INSERT, through each field's ``pre_save`` (``auto_now_add`` and the like).
    Pass the same ``fields`` object each time (e.g. :func:`insert_fields`): what is worked out
    for it is kept.
    """
    steps, pairs, plain_only = _plan(fields)
    if add and not plain_only:
        return [
            [c(f.pre_save(obj, True) if not plain else getattr(obj, name)) for c, name, f, plain in steps]
            for obj in objs
        ]
    return [[c(getattr(obj, name)) for c, name in pairs] for obj in objs]


_insert_fields: dict[type[models.Model], tuple[Field, ...]] = {}


def insert_fields(model: type[models.Model]) -> tuple[Field, ...]:
    """The columns an INSERT of ``model`` writes: every concrete field but an automatic key."""
    found = _insert_fields.get(model)
    if found is None:
        found = _insert_fields[model] = tuple(
            f for f in model._meta.concrete_fields if not (f.primary_key and isinstance(f, models.AutoField))
        )
    return found


# --- lookups -----------------------------------------------------------------------------------


class AnyOf(Lookup):
    """``filter(AnyOf(F("pk"), values))``: the column is one of ``values``.

    ``= ANY(%s)`` with one array on PostgreSQL (one short statement text for any number of
    values); ``IN (%s, …)`` elsewhere.
    """

    lookup_name = "prescient_any_of"
    prepare_rhs = False

    def _values(self, connection: Any) -> list[Any]:
        field = self.lhs.output_field
        return [field.get_db_prep_value(value, connection, prepared=False) for value in self.rhs]

    # The parameters are a list, as Django 5.2 has them (6.0 takes a list or a tuple): the stubs
    # want a tuple of str and int, which an array parameter is not either.
    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:  # type: ignore[override]
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = self._values(connection)
        if not values:
            return "1 = 0", []
        return f"{lhs} IN ({', '.join(['%s'] * len(values))})", [*lhs_params, *values]

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        cast = self.lhs.output_field.cast_db_type(connection)
        return f"{lhs} = ANY(%s::{cast}[])", [*lhs_params, self._values(connection)]


# --- statements --------------------------------------------------------------------------------


def _unnest(fields: Sequence[Field]) -> str:
    return "unnest(" + ", ".join(f"%s::{f.cast_db_type(connection)}[]" for f in fields) + ")"


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def _guard_sql(model: type[models.Model], guard: dict[str, Any] | None) -> tuple[str, list[Any]]:
    if not guard:
        return "", []
    meta, table = model._meta, _qn(model._meta.db_table)
    fields = [cast(Field, meta.get_field(name)) for name in guard]
    sql, params = "", list[Any]()
    for f, value in zip(fields, guard.values(), strict=True):
        if value is None:  # a guard that a column is empty
            sql += f" AND {table}.{quote_column(f)} IS NULL"
        else:
            sql += f" AND {table}.{quote_column(f)} = %s"
            params.append(f.get_db_prep_save(value, connection))
    return sql, params


def update_rows(
    model: type[models.Model],
    objs: Sequence[models.Model],
    names: Sequence[str],
    *,
    guard: dict[str, Any] | None = None,
) -> list[Any]:
    """``UPDATE`` the fields ``names`` of ``objs``, each row by its primary key.

    With ``guard`` (``{field name: value}``, PostgreSQL only), only rows that still hold those
    values are written. Returns the primary keys of the rows written (all of ``objs`` without
    a guard).
    """
    if not objs:
        return []
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    fields = (pk, *(cast(Field, meta.get_field(name)) for name in names))
    fields = _same(fields)
    table = _qn(meta.db_table)
    rows = prep_all(objs, fields)
    with connection.cursor() as cursor:
        if _arrays():
            aliases = [_qn(f"c{i}") for i in range(len(fields))]
            assignments = ", ".join(f"{quote_column(f)} = v.{aliases[i]}" for i, f in enumerate(fields) if i)
            guard_sql, guard_params = _guard_sql(model, guard)
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM {_unnest(fields)} AS v ({', '.join(aliases)}) "
                f"WHERE {table}.{quote_column(pk)} = v.{aliases[0]}{guard_sql} RETURNING {table}.{quote_column(pk)}",
                [*_columns(rows, len(fields)), *guard_params],
            )
            return [row[0] for row in cursor.fetchall()]
        if guard:
            raise NotImplementedError("a guarded update_rows needs PostgreSQL")
        assignments = ", ".join(f"{quote_column(f)} = %s" for f in fields[1:])
        cursor.executemany(
            f"UPDATE {table} SET {assignments} WHERE {quote_column(pk)} = %s", [[*row[1:], row[0]] for row in rows]
        )
        return [obj.pk for obj in objs]


_same_fields: dict[tuple[Field, ...], tuple[Field, ...]] = {}


def _same(fields: tuple[Field, ...]) -> tuple[Field, ...]:
    """One tuple object per list of fields, so that :func:`prep_all` can keep its plan."""
    return _same_fields.setdefault(fields, fields)


def delete_rows(model: type[models.Model], pks: Sequence[Any]) -> int:
    """``DELETE`` the rows of ``model`` with these primary keys (no signals, no cascades)."""
    if not pks:
        return 0
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    if not _arrays():
        return int(model._base_manager.filter(pk__in=pks).delete()[0])
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_qn(meta.db_table)} WHERE {quote_column(pk)} = ANY(%s::{pk.cast_db_type(connection)}[])",
            [[pk.get_db_prep_save(value, connection) for value in pks]],
        )
        return int(cursor.rowcount)


def delete_returning(model: type[models.Model], pks: Sequence[Any], guard: dict[str, Any]) -> list[Any]:
    """``DELETE`` the rows with these primary keys that hold the ``guard`` values, and return
    them as they were (PostgreSQL only)."""
    if not pks:
        return []
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    table = _qn(meta.db_table)
    guard_sql, guard_params = _guard_sql(model, guard)
    columns = ", ".join(quote_column(f) for f in meta.concrete_fields)
    sql = (
        f"DELETE FROM {table} WHERE {table}.{quote_column(pk)} = ANY(%s::{pk.cast_db_type(connection)}[])"
        f"{guard_sql} RETURNING {columns}"
    )
    return list(model._base_manager.raw(sql, [[pk.get_db_prep_save(v, connection) for v in pks], *guard_params]))


_insert_sql: dict[tuple[Any, ...], tuple[Sequence[Field], str]] = {}


def insert_rows(
    model: type[models.Model],
    rows: Sequence[Sequence[Any]],
    fields: Sequence[Field],
    *,
    skip_conflicts_on: tuple[str, ...] = (),
    returning: str | None = None,
    notify: str | None = None,
) -> list[Any]:
    """``INSERT`` prepared ``rows`` (values of ``fields``, see :func:`prep_all`) in one statement.

    With ``skip_conflicts_on`` (the columns of a unique constraint), rows that clash with it
    are skipped (``ON CONFLICT (…) DO NOTHING``). With ``returning`` (a column name), the
    values of that column of the rows written are returned, else nothing. With ``notify``
    (a channel; PostgreSQL, with ``returning``), the same statement also sends a ``NOTIFY``
    on it for each row written, so that a row and its wake-up are one round trip and commit
    together. Give at most :func:`max_rows` rows.
    """
    if not rows:
        return []
    if notify is not None and not (_arrays() and returning):
        raise ValueError("notify= needs PostgreSQL and returning=")
    # One row goes as VALUES (quickest to plan); many as arrays on PostgreSQL.
    arrays = _arrays() and len(rows) > 1
    key = (connection.vendor, model, id(fields), skip_conflicts_on, returning, notify is not None,
           0 if arrays else len(rows))
    found = _insert_sql.get(key)
    if found is None or found[0] is not fields:
        sql = f"INSERT INTO {_qn(model._meta.db_table)} ({', '.join(quote_column(f) for f in fields)}) "
        if arrays:
            sql += f"SELECT * FROM {_unnest(fields)} AS v"
        else:
            placeholder = "(" + ", ".join(["%s"] * len(fields)) + ")"
            sql += f"VALUES {', '.join([placeholder] * len(rows))}"
        if skip_conflicts_on:
            sql += f" ON CONFLICT ({', '.join(_qn(c) for c in skip_conflicts_on)}) DO NOTHING"
        if returning:
            sql += f" RETURNING {_qn(returning)}"
        if notify is not None:
            sql = f"WITH written AS ({sql}) SELECT {_qn(cast(str, returning))}, pg_notify(%s, '') FROM written"
        if len(_insert_sql) > 200:
            _insert_sql.clear()
        found = _insert_sql[key] = (fields, sql)
    params: list[Any] = _columns(rows, len(fields)) if arrays else [value for row in rows for value in row]
    if notify is not None:
        params.append(notify)
    with connection.cursor() as cursor:
        cursor.execute(found[1], params)
        if returning:
            return [row[0] for row in cursor.fetchall()]
    return []


def max_rows(fields: Sequence[Field], wanted: int) -> int:
    """How many rows of ``fields`` one :func:`insert_rows` may carry (SQLite limits parameters)."""
    limit = None if _arrays() else connection.features.max_query_params
    if limit is None:
        return wanted
    return max(1, min(wanted, limit // max(1, len(fields))))


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of at most ``size``."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
