"""A helper process for measurements that need two processes at once: ``python -m bench.agent``.

Reads one JSON command per line on stdin, answers one JSON line on stdout. Each command waits
until ``go_at`` (a ``time.time()``), so that several agents start together:

- ``{"cmd": "tick", "now": ISO, "go_at": T}``: one prescient tick; answers its start and end;
- ``{"cmd": "raw_sweep", "now": ISO, "go_at": T}``: the raw baseline's claim-and-delete loop;
- ``{"cmd": "quit"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.db import connection

    from bench import suite
    from prescient.runtime.tick import tick

    connection.ensure_connection()
    raw = suite.Raw()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        now = datetime.fromisoformat(command["now"])
        time.sleep(max(0.0, command["go_at"] - time.time()))
        start = time.time()
        done = tick(now).processed if command["cmd"] == "tick" else suite.raw_sweep(raw, now)
        print(json.dumps({"start": start, "end": time.time(), "done": done}), flush=True)
    raw.close()


if __name__ == "__main__":
    main()
