"""The claim's plan on PostgreSQL (prescient.engine.store.claims._pick)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.postgres
def test_the_claims_walk_over_priorities__reads_each_priority_once_never_the_null_that_ends_it(make_job, t0):
    """Found at 1 M due jobs (bench scale): the walk over the priorities ends with a NULL, and the
    claim's lateral ran for it too (``priority = NULL``), reading the whole due range to match
    nothing: 150 ms a claim. The lateral runs once per priority that has jobs, and no more."""
    import json

    from django.db import connection

    from prescient.engine.store.claims import _pick

    if connection.vendor != "postgresql":
        pytest.skip("the claim's walk is PostgreSQL's")
    for priority in (0, 0, 5):
        make_job(next_check_at=t0, priority=priority)
    ctes, pick, params = _pick(t0, 100, None)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) WITH RECURSIVE {ctes}picked AS ({pick}) SELECT * FROM picked",
                       params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def nodes(node):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    [lateral] = [n for n in nodes(plan[0]["Plan"]) if n["Node Type"] == "LockRows"]
    assert lateral["Actual Loops"] == 2  # priorities 5 and 0: not a third time for the NULL
