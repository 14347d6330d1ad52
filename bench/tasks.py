"""The benchmark's django.tasks task (Django 6+): it does nothing, so the figures measure the
backends. Run by prescient's backend and, for the comparison, by django-tasks-db's."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2: no django.tasks, no task benchmarks
    pass
else:

    @task
    def noop() -> None:
        return None

    @task
    def wait() -> None:
        """A call to a partner's API: BENCH_WAIT_MS (default 50 ms) of waiting (bench/io.py)."""
        import os
        import time

        time.sleep(float(os.environ.get("BENCH_WAIT_MS", "50")) / 1000)
