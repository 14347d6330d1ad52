"""Workflow benchmark: a fan-out of N children waiting on one parent.

Measured from the parent's end (its settle, which unblocks the N children in the same
transaction) to the last child's end (one in-process tick sweeping them), against the same N
jobs scheduled without a parent and swept by one tick. Both in one process, on the same
database, in the same run.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

import prescient
from bench.models import Item
from bench.suite import Results, add_jobs, clear_jobs, log, timed, vacuum
from prescient.engine import store
from prescient.engine.decisions import Decision, TickSummary
from prescient.models import FutureJob
from prescient.runtime.tick import tick
from prescient.states import Event, Outcome, State

#: A check that ends at once (bench.noop re-checks half its jobs).
END = "bench.end"


@prescient.check(END, model="bench.Item")
def end(item: Item, job: object) -> None:
    return None


def fanout(res: Results, sizes: dict[str, Any]) -> None:
    count, runs = sizes.get("fanout", 10_000), sizes["runs"]
    # Not bench.suite.ensure_items: run as ``python -m bench.suite``, that module is __main__ and
    # this import of it is a second copy, with a counter of its own.
    Item.objects.bulk_create([Item(pk=pk) for pk in range(1, count + 2)], ignore_conflicts=True, batch_size=5000)
    for run in range(runs):
        now = timezone.now()
        due = now - timedelta(hours=1)
        clear_jobs()
        add_jobs(1, count, due, check=END)
        vacuum("prescient_futurejob", "prescient_jobhistory")
        seconds, summary = timed(lambda: tick(now))  # noqa: B023 (called at once)
        assert summary.counts[Outcome.COMPLETED] == count, summary.line()
        res.add("workflow.flat", seconds)

        clear_jobs()
        parent = prescient.schedule(Item.objects.get(pk=count + 1), END, at=due, now=now)
        children = Item.objects.filter(pk__lte=count)
        assert prescient.schedule_many(children, END, at=due, after=[parent], now=now, batch_size=5000) == count
        vacuum("prescient_futurejob", "prescient_jobhistory")
        [claimed] = store.claim(now, 10, "tick:0:bench-parent", start=True)  # its run started
        decision = Decision(job=claimed, event=Event.FINISH, outcome=Outcome.COMPLETED, ran=True)

        def parent_ends_then_children_run(decision: Decision = decision, now: datetime = now) -> TickSummary:
            store.settle([decision], "tick:0:bench-parent", now, TickSummary())
            return tick(now)

        seconds, summary = timed(parent_ends_then_children_run)
        assert summary.counts[Outcome.COMPLETED] == count, summary.line()
        assert not FutureJob.objects.filter(state=State.WAITING).exists()
        res.add("workflow.fanout", seconds)
        log(f"fan-out run {run + 1}/{runs}: flat {res.values['workflow.flat'][-1]:.2f}s, "
            f"after one parent {seconds:.2f}s")
    clear_jobs()
