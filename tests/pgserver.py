"""A PostgreSQL server of a test's own, for tests that stop, restart or reconfigure a server.

``make test`` never restarts or stops the cluster it was given (``PG_URL``): a test that needs
to do that to a server starts a throwaway one instead, with the PostgreSQL binaries installed
on the machine: ``initdb`` into a temporary folder, its own free port on 127.0.0.1, trust
authentication, no Unix socket (so nothing is shared with the machine's cluster), ``fsync``
off. initdb and postgres refuse to run as root; as root, they run as the ``postgres`` OS user,
which owns the folder::

    with PostgresServer.throwaway() as server:
        url = server.create_database("prescient_restart")
        ...
        server.restart()

The server is stopped and its folder deleted when the block ends, whatever happened in it.
:meth:`PostgresServer.run_as_owner` and :attr:`PostgresServer.bindir` are there for servers
built from one another (a replica from ``pg_basebackup`` of a primary).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

#: Where Debian puts each major version's binaries (the machine's cluster's and any other).
LIB = Path("/usr/lib/postgresql")

#: Settings of a throwaway server: small, fast, reachable on its port only.
CONF = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "50",
    "shared_buffers": "'32MB'",
    "log_min_messages": "warning",
}


def find_bindir() -> Path | None:
    """The newest major version's binaries under /usr/lib/postgresql, else ``pg_config``'s."""
    versions = sorted(
        (p for p in LIB.glob("*") if p.name.isdigit() and (p / "bin" / "initdb").is_file()),
        key=lambda p: int(p.name),
    )
    if versions:
        return versions[-1] / "bin"
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        if found and (Path(found) / "initdb").is_file():
            return Path(found)
    return None


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI=true, where a throwaway server must be possible."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"a throwaway PostgreSQL server is needed: {reason}")
    pytest.skip(f"a throwaway PostgreSQL server is needed: {reason}")


class PostgresServer:
    """One PostgreSQL server in ``folder`` (data in ``folder/data``, log in ``folder/log``)."""

    def __init__(self, folder: Path, bindir: Path, port: int, owner: str | None) -> None:
        self.folder = folder
        self.bindir = bindir
        self.port = port
        self.owner = owner  # the OS user the server runs as when this is root; None: this user
        self.data = folder / "data"
        self.log = folder / "log"

    @classmethod
    @contextlib.contextmanager
    def throwaway(cls, conf: dict[str, str] | None = None) -> Iterator[PostgresServer]:
        """A new server, initialised and started; stopped and deleted when the block ends."""
        bindir = find_bindir()
        if bindir is None:
            unavailable(f"no initdb under {LIB}/<version>/bin or pg_config --bindir")
        owner = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                unavailable("running as root and there is no `postgres` OS user to run initdb as")
            owner = "postgres"
        folder = Path(tempfile.mkdtemp(prefix="prescient-pg-"))
        server = cls(folder, bindir, free_port(), owner)
        try:
            if owner:
                shutil.chown(folder, user=owner, group=pwd.getpwnam(owner).pw_gid)
            server.initdb({**CONF, **(conf or {})})
            server.start()
            yield server
        finally:
            server.destroy()

    # --- the server's life -----------------------------------------------------------------

    def run_as_owner(self, args: Sequence[str | os.PathLike[str]], timeout: float = 120) -> str:
        """Run a PostgreSQL binary as the server's OS user; its output, or an error with it."""
        command = [str(a) for a in args]
        if self.owner:
            command = ["runuser", "-u", self.owner, "--", *command]
        done = subprocess.run(
            command, cwd=self.folder, capture_output=True, text=True, timeout=timeout, check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}{self.log_tail()}"
            )
        return done.stdout

    def initdb(self, conf: dict[str, str]) -> None:
        self.run_as_owner([
            self.bindir / "initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        ])
        lines = [f"{key} = {value}" for key, value in {**conf, "port": str(self.port)}.items()]
        with open(self.data / "postgresql.conf", "a") as f:  # the owner's file; root may append
            f.write("\n# prescient's throwaway server (tests/pgserver.py)\n" + "\n".join(lines) + "\n")

    def pg_ctl(self, *args: str, timeout: float = 120) -> str:
        return self.run_as_owner(
            [self.bindir / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", str(int(timeout)), *args],
            timeout=timeout + 10,
        )

    def start(self) -> None:
        self.pg_ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("stop", "-m", mode)

    def restart(self) -> None:
        """Stop the server (fast: its clients' connections are cut) and start it on the same
        folder and port."""
        self.pg_ctl("restart", "-m", "fast")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def destroy(self) -> None:
        """Stop the server however it is (immediately; killed if pg_ctl cannot) and delete its
        folder."""
        try:
            if self.postmaster_pid() is not None:
                try:
                    self.stop("immediate")
                except (RuntimeError, subprocess.TimeoutExpired):
                    pid = self.postmaster_pid()
                    if pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)  # its backends exit when it is gone
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    # --- its databases -----------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create ``name``; its URL."""
        import psycopg

        with psycopg.connect(self.url("postgres").replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def query(self, database: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """The rows of one statement, on a connection of its own (so it works across restarts)."""
        import psycopg

        with psycopg.connect(self.url(database).replace("postgres://", "postgresql://", 1), connect_timeout=5) as conn:
            return list(conn.execute(sql, params or None).fetchall())
