"""The demo project in a real process: ``manage.py demo --once`` sets up, seeds and ticks.

The demo app is not installed under ``tests.settings``, so the command runs as a user would
run it: ``manage.py`` with the demo's own settings, on a fresh SQLite file (``DEMO_DB``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo__once_prints_login_and_ticks_the_seeded_orders(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env["DEMO_DB"] = str(tmp_path / "demo.sqlite3")
    result = subprocess.run(
        [sys.executable, "manage.py", "demo", "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "login: http://127.0.0.1:8000/admin/  user: admin  password: admin" in result.stdout
    # Six demo orders: two shipped and three unshipped are due at once, one is due later.
    assert "prescient tick: processed=5 completed=2 " in result.stdout
    assert " rescheduled=3 " in result.stdout
