"""A host clock off by ``PRESCIENT_FAKE_CLOCK_OFFSET`` seconds, for the clock-skew fault tests.

Put on ``PYTHONPATH`` of a process (and so of the children it spawns), this shifts the wall
clock as the process sees it: ``time.time`` and ``django.utils.timezone.now``, which is how
prescient and Django read the host's time. The code under test is unchanged and reads time
exactly as in production; the monotonic clock stays true (libfaketime cannot do this on this
platform without breaking ``time.sleep`` or ``threading.Event.wait``).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time
from datetime import timedelta
from typing import Any

OFFSET = float(os.environ.get("PRESCIENT_FAKE_CLOCK_OFFSET") or 0)


class _ShiftTimezoneNow(importlib.abc.MetaPathFinder):
    """Wraps ``django.utils.timezone.now`` as soon as that module is loaded."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "django.utils.timezone":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.loader is not None
        loader: Any = spec.loader
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            real_now = module.now
            module.now = lambda: real_now() + timedelta(seconds=OFFSET)

        loader.exec_module = exec_module
        return spec


if OFFSET:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + OFFSET
    time.time_ns = lambda: _time_ns() + int(OFFSET * 1e9)
    sys.meta_path.insert(0, _ShiftTimezoneNow())
