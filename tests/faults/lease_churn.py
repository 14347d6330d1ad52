"""A process of the lease-renewal fault test (tests/faults/test_leases.py), driving the store as
a worker does, through its own functions, faster than a worker would:

``python -m tests.faults.lease_churn renew PREFIX UNTIL``
    a worker's heartbeat: ``store.renew_leases(PREFIX/, prefix=True)`` over and over, every
    0.1 s (five times the fastest heartbeat allowed, to meet many settles: the renewal in no set
    order deadlocked about once in 3 s of this, and about once in 10 s at 0.5 s).
``python -m tests.faults.lease_churn settle PREFIX CHILD UNTIL``
    one of its children: claim a parcel under ``PREFIX/CHILD/<n>``, hold it a moment as its
    runs would, then settle it in one transaction, most jobs re-checked and some handed back,
    all due again at once (so thousands of rows go round for the whole time).

Each goes on until UNTIL (seconds since the epoch: all stop together, however late the host
let one start) and prints one JSON line of counts; a database error is counted and printed with
its class and message (the test fails on any), and the loop goes on, as the worker's does.
"""

from __future__ import annotations

import json
import os
import sys
import time

#: Seconds between two renewals.
RENEW_EVERY = 0.1


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.db import DatabaseError

    from prescient.clock import db_now
    from prescient.engine import store
    from prescient.engine.decisions import Decision, TickSummary
    from prescient.states import Event

    role, prefix = argv[0], argv[1]
    until = float(argv[-1])
    counts: dict[str, int] = {"passes": 0, "rows": 0, "most": 0, "errors": 0}
    while time.time() < until:
        try:
            if role == "renew":
                renewed = store.renew_leases(f"{prefix}/", prefix=True)
                counts["rows"] += renewed
                counts["most"] = max(counts["most"], renewed)
                time.sleep(RENEW_EVERY)
            else:
                now = db_now()
                token = f"{prefix}/{argv[2]}/{counts['passes']}"
                jobs = store.claim(now, 1000, token, start=True)
                time.sleep(0.05)  # the parcel's runs
                decisions = [
                    Decision(job=job, event=Event.HAND_BACK, next_check_at=now) if job.pk % 10 == 0
                    else Decision(job=job, event=Event.RESCHEDULE, next_check_at=now, ran=True)
                    for job in jobs
                ]
                summary = TickSummary()
                store.settle(decisions, token, now, summary)
                counts["rows"] += len(jobs)
                for key, value in summary.counts.items():
                    counts[key] = counts.get(key, 0) + value
        except DatabaseError as exc:
            counts["errors"] += 1
            print(f"{type(exc.__cause__ or exc).__name__}: {exc}".replace("\n", " "), file=sys.stderr, flush=True)
        counts["passes"] += 1
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
