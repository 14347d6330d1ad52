"""Read-only queries for the dashboard and the status: counts computed in the database.

:class:`EpochBucket` numbers the fixed-length buckets a datetime falls in, counted from the
Unix epoch as slots are; :func:`bucket_counts` groups rows by bucket in one query.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import NotSupportedError
from django.db.models import Count, Func, IntegerField, QuerySet

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType

from prescient import slots


class EpochBucket(Func):
    """The index of the ``seconds``-long bucket a datetime falls in: ``floor(epoch seconds / seconds)``.

    Buckets are counted from the Unix epoch, as slots are, so buckets of whole slots line up
    with the slots. A chart is one ``GROUP BY`` on this, in the database (SQLite, PostgreSQL).
    """

    output_field = IntegerField()
    arity = 1

    def __init__(self, expression: Any, seconds: int) -> None:
        seconds = int(seconds)
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        self.seconds = seconds
        super().__init__(expression)

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> _AsSqlType:
        raise NotSupportedError(f"EpochBucket supports SQLite and PostgreSQL, not {connection.vendor}")

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any) -> _AsSqlType:
        # strftime('%s') of the text Django stores ("YYYY-MM-DD HH:MM:SS.ffffff", UTC) without
        # its fraction, which SQLite would round to the millisecond (10:14:59.9999 -> 10:15);
        # integer division floors. '%' is doubled for this template and for the backend.
        template = (
            "(CAST(strftime('%%%%s', substr(%(expressions)s, 1, 19)) AS INTEGER) / " + str(self.seconds) + ")"
        )
        return super().as_sql(compiler, connection, template=template, **extra_context)

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        template = "CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / " + str(self.seconds) + ") AS BIGINT)"
        return super().as_sql(compiler, connection, template=template, **extra_context)


def bucket_counts(
    queryset: QuerySet[Any], field_name: str, start: datetime, minutes: int, key: str
) -> dict[tuple[int, str], int]:
    """``{(bar, value of key): count}`` for the rows of ``queryset``, in one GROUP BY.

    ``bar`` counts ``minutes``-long buckets from ``start`` (itself a bucket boundary).
    """
    seconds = minutes * 60
    first = int((start - slots.EPOCH).total_seconds()) // seconds
    rows = (
        queryset.order_by()
        .annotate(bucket=EpochBucket(field_name, seconds))
        .values("bucket", key)
        .annotate(n=Count("pk"))
    )
    return {(int(row["bucket"]) - first, row[key]): row["n"] for row in rows}
