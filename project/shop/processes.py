"""The demo's child processes (the web server, a ``prescient_worker``), started and stopped together.

Each child runs in a session of its own, so a Ctrl-C in the terminal reaches the demo alone,
which then stops each child once, by SIGINT, and waits for it (a worker finishes its runs in
flight). A child that does not stop in time, or a second Ctrl-C, kills its whole process group
(a worker's own child processes with it). On Linux each child is also told to stop (SIGTERM)
if the demo dies without stopping it, so none outlives the demo.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

MANAGE = Path(__file__).resolve().parent.parent.parent / "manage.py"

#: Seconds each child has to stop after SIGINT before its process group is killed.
STOP_SECONDS = 20.0


def split_addrport(addrport: str) -> tuple[str, int]:
    """``(host, port)`` of a runserver ``addrport``: "8000", "127.0.0.1:8000", "[::1]:8000";
    the host is "" when only the port is given. Raises ValueError for a port that is no number."""
    host, _, port = addrport.rpartition(":")
    return host, int(port)


def port_problem(addrport: str) -> str | None:
    """Why the web server could not listen on ``addrport`` (busy, not allowed), or None."""
    host, port = split_addrport(addrport)
    family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET
    host = host.strip("[]")
    if host in ("", "0"):
        host = "127.0.0.1"
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the development server does, so a port left in TIME_WAIT is not taken for busy.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} is busy: another program (a demo still running?) listens on {host}:{port}"
            if exc.errno == errno.EACCES:
                return f"port {port} needs more privileges than this user has"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def _child_setup() -> None:  # pragma: no cover (runs in the child, between fork and exec)
    """In the child: SIGINT handled (a shell starts background jobs with it ignored, which a
    child would inherit), and on Linux a SIGTERM when the demo dies (PR_SET_PDEATHSIG)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Children:
    """The demo's child processes, by name."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start ``manage.py <args>`` as ``name``, in a session of its own."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [sys.executable, str(MANAGE), *args], env=env, start_new_session=True,
            preexec_fn=_child_setup,  # noqa: PLW1509
        )
        self.procs[name] = proc
        return proc

    def ended(self) -> tuple[str, int] | None:
        """The name and exit status of a child that has ended, if any has."""
        for name, proc in self.procs.items():
            status = proc.poll()
            if status is not None:
                return name, status
        return None

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Stop every child: SIGINT once, then wait; past ``timeout`` (or on a second Ctrl-C),
        kill what is left, process groups and all."""
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal(proc, signal.SIGINT)
        deadline = time.monotonic() + timeout
        try:
            for name, proc in self.procs.items():
                try:
                    proc.wait(max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    self.say(f"the {name} did not stop within {timeout:.0f} s: killed")
        except KeyboardInterrupt:
            self.say("killed the web server and the worker")
        for proc in self.procs.values():
            _kill_group(proc)
            proc.wait()


def _signal(proc: subprocess.Popen[bytes], signum: int) -> None:
    try:
        proc.send_signal(signum)
    except ProcessLookupError:
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill whatever is left of ``proc``'s process group (its own children too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
