"""The admin lists' counts, which never scan a large table (#36): a list is counted exactly up
to :data:`EXACT_UP_TO` rows (one ``count(*)`` over at most that many), and beyond that the count
is PostgreSQL's planner estimate, which the page says (``cl.paginator.estimated``). At ten
million live jobs an exact ``COUNT(*)`` of the job list alone took longer than the whole page may.

An estimate may be a little high: a page past the last real one is then an empty page, not an
error. Other databases count exactly, as Django does.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import EmptyPage, Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

from prescient.counting import counts

#: Rows counted one by one before the list's count becomes the planner's estimate.
EXACT_UP_TO = 100_000


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """A paginator whose count is exact up to :data:`EXACT_UP_TO` rows, then the planner's
    estimate (PostgreSQL); :attr:`estimated` says which."""

    #: True when :attr:`count` is the planner's estimate (read it after the count).
    estimated = False

    @cached_property
    def count(self) -> int:
        rows_of: QuerySet[Any] = self.object_list  # type: ignore[assignment]  # the admin's lists are querysets
        [(rows, exact)] = counts({"rows": rows_of}, exact_up_to=EXACT_UP_TO).values()
        self.estimated = not exact
        return rows

    def validate_number(self, number: Any) -> int:
        try:
            return super().validate_number(number)
        except EmptyPage:
            if not self.estimated or int(number) < 1:
                raise
            return int(number)  # past the last page the estimate promised: an empty page
