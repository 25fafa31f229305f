"""A throwaway MariaDB server in a temporary directory, for tests and the demo.

``MariadbSandbox`` runs ``mariadb-install-db`` into a fresh datadir, starts ``mariadbd`` on a
free loopback port with the binary log on (ROW format by default), waits until it accepts
connections, and stops it (SIGTERM, then SIGKILL) and removes the datadir on ``stop()``.
Nothing here reads the machine's own MariaDB configuration (``--no-defaults``).

A sandbox does not outlive the process that started it: ``mariadbd`` runs in a session of
its own (so a test's Ctrl-C or a killed process group does not take it down mid-test), so
when its owner died without ``stop()`` (a benchmark or test run killed with SIGKILL, a
timeout) it used to run on, holding its port, memory and temporary directory. A watchdog
process (:data:`_WATCHDOG`: a few lines of Python, no imports beyond ``os`` and
``select``) waits on a pidfd of the owner, without polling, and on its exit SIGKILLs the
server's process group and removes the sandbox's directory.
``stop()`` and ``kill()`` end the watchdog first; :meth:`MariadbSandbox.release` ends it
and leaves the server running (``headwater demo --keep``).

The binlog settings a test varies per session or per test (``binlog_row_image``,
``binlog_row_metadata``, ``binlog_checksum``) are dynamic in MariaDB 10.11, so one server
serves them all; :meth:`MariadbSandbox.binlog_settings` sets and restores them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

__all__ = ["MariadbSandbox", "SandboxOptions", "free_port"]

#: The watchdog's program (module docstring): argv is the owner's pid, the server's process
#: group, and the directory to remove. It exits at once if the owner is
#: already gone after killing the server, and quietly when it is itself terminated.
_WATCHDOG = """
import os, select, shutil, signal, sys
owner, group, directory = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
try:
    fd = os.pidfd_open(owner)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while not poller.poll():
        pass
except ProcessLookupError:
    pass
try:
    os.killpg(group, signal.SIGKILL)
except ProcessLookupError:
    pass
shutil.rmtree(directory, ignore_errors=True)
"""

log = logging.getLogger(__name__)

_SEARCH_PATH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


def _find(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or next(
            (f"{d}/{name}" for d in _SEARCH_PATH if os.access(f"{d}/{name}", os.X_OK)), None
        )
        if found:
            return found
    raise FileNotFoundError(
        f"none of {', '.join(names)} found; install Debian's mariadb-server package"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class SandboxOptions:
    """How to start the sandbox server. ``extra`` adds raw ``--name=value`` options."""

    server_id: int = 1
    log_bin: bool = True
    binlog_format: str = "ROW"
    binlog_row_image: str = "FULL"
    binlog_row_metadata: str = "FULL"
    binlog_checksum: str = "CRC32"
    log_slave_updates: bool = True
    gtid_domain_id: int = 0
    extra: tuple[str, ...] = field(default_factory=tuple)
    start_timeout: float = 60.0


class MariadbSandbox:
    """One running ``mariadbd`` in a temporary datadir, root with an empty password."""

    def __init__(
        self,
        options: SandboxOptions | None = None,
        *,
        basedir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.options = options or SandboxOptions()
        self.dir = Path(tempfile.mkdtemp(prefix="headwater-mariadb-", dir=basedir))
        self.datadir = self.dir / "data"
        self.tmpdir = self.dir / "tmp"
        self.socket = str(self.dir / "mysqld.sock")
        self.port = 0
        self.host = "127.0.0.1"
        self._proc: subprocess.Popen[bytes] | None = None
        self._watch: subprocess.Popen[bytes] | None = None
        self._args: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> MariadbSandbox:
        install = _find("mariadb-install-db", "mysql_install_db")
        mariadbd = _find("mariadbd", "mysqld")
        user_args = ["--user=root"] if os.geteuid() == 0 else []
        # A private tmpdir: bootstraps running at the same time in a shared /tmp collide on
        # their temporary table files ("Unknown table 'mysql.tmp_user_sys'").
        self.tmpdir.mkdir(exist_ok=True)
        done = subprocess.run(
            [
                install,
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *user_args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
        if done.returncode != 0:
            output = done.stdout.decode(errors="replace").strip().splitlines()
            raise RuntimeError(
                f"mariadb-install-db failed with status {done.returncode}: "
                + " | ".join(output[:6])
            )
        o = self.options
        last_error: Exception | None = None
        for _attempt in range(3):  # the free port can be taken between probe and bind
            self.port = free_port()
            args = [
                mariadbd,
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",
                f"--socket={self.socket}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--pid-file={self.dir / 'mysqld.pid'}",
                f"--log-error={self.dir / 'error.log'}",
                f"--server-id={o.server_id}",
                f"--gtid-domain-id={o.gtid_domain_id}",
                "--innodb-buffer-pool-size=128M",
                "--innodb-log-file-size=64M",
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
                "--max-connections=200",
                "--skip-name-resolve",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
                "--max-allowed-packet=256M",
                "--default-time-zone=+00:00",
                *user_args,
            ]
            if o.log_bin:
                args += [
                    f"--log-bin={self.datadir / 'mysql-bin'}",
                    f"--binlog-format={o.binlog_format}",
                    f"--binlog-row-image={o.binlog_row_image}",
                    f"--binlog-row-metadata={o.binlog_row_metadata}",
                    f"--binlog-checksum={o.binlog_checksum}",
                ]
                if o.log_slave_updates:
                    args.append("--log-slave-updates")
            args += list(o.extra)
            self._args = args
            self._proc = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
            self._arm()
            try:
                self._wait_ready(o.start_timeout)
                return self
            except (TimeoutError, RuntimeError) as e:
                last_error = e
                self._kill()
        raise RuntimeError(f"mariadbd did not start: {last_error}; see {self.dir}/error.log")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with {self._proc.returncode}: {self.error_log_tail()}"
                )
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"mariadbd not ready after {timeout} s") from None
                time.sleep(0.05)

    def _arm(self) -> None:
        """Start the watchdog of the current server process (module docstring)."""
        self._disarm()
        assert self._proc is not None
        self._watch = subprocess.Popen(
            [sys.executable, "-S", "-c", _WATCHDOG, str(os.getpid()), str(self._proc.pid),
             str(self.dir)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def _disarm(self) -> None:
        if self._watch is not None:
            if self._watch.poll() is None:
                self._watch.terminate()
            self._watch.wait(timeout=30)
            self._watch = None

    def release(self) -> None:
        """Leave the server running after this process ends (no watchdog): stop it with
        ``kill $(cat <dir>/mysqld.pid)``."""
        self._disarm()

    def stop(self, *, remove: bool = True) -> None:
        """Stop the server (clean shutdown, SIGKILL after 30 s) and remove its directory."""
        self._disarm()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._kill()
        self._proc = None
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (the datadir stays)."""
        self._kill()

    def restart(self) -> None:
        """Stop cleanly and start again on the same datadir and port."""
        assert self._proc is not None, "not running"
        self.stop(remove=False)
        self._proc = subprocess.Popen(
            self._args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self._arm()
        self._wait_ready(self.options.start_timeout)

    def _kill(self) -> None:
        self._disarm()
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=30)

    def __enter__(self) -> MariadbSandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def error_log_tail(self, lines: int = 20) -> str:
        path = self.dir / "error.log"
        if not path.exists():
            return "(no error log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # -- use -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"mysql://root@{self.host}:{self.port}"

    def connect(
        self, database: str | None = None, *, user: str = "root", password: str = "", **kwargs: Any
    ) -> pymysql.connections.Connection[Any]:
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=user,
            password=password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
            connect_timeout=5,
            **kwargs,
        )

    def execute(self, *statements: str, database: str | None = None) -> None:
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
        finally:
            conn.close()

    def query(self, sql: str, args: Any = None, *, database: str | None = None) -> list[Any]:
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        finally:
            conn.close()

    def binlog_position(self) -> tuple[str, int]:
        """The server's current binlog file and offset (``SHOW MASTER STATUS``)."""
        row = self.query("SHOW MASTER STATUS")[0]
        return str(row[0]), int(row[1])

    def binlog_path(self, name: str) -> Path:
        return self.datadir / name

    @contextlib.contextmanager
    def binlog_settings(
        self,
        *,
        row_image: str | None = None,
        metadata: str | None = None,
        checksum: str | None = None,
    ) -> Iterator[None]:
        """Set global binlog variables for the duration of a block, then restore them.

        New connections see the new ``binlog_row_image``; ``binlog_checksum`` changes
        rotate the binary log.
        """
        names = {
            "binlog_row_image": row_image,
            "binlog_row_metadata": metadata,
            "binlog_checksum": checksum,
        }
        wanted = {k: v for k, v in names.items() if v is not None}
        before = {k: str(self.query(f"SELECT @@GLOBAL.{k}")[0][0]) for k in wanted}
        self.execute(*(f"SET GLOBAL {k} = '{v}'" for k, v in wanted.items()))
        try:
            yield
        finally:
            self.execute(*(f"SET GLOBAL {k} = '{v}'" for k, v in before.items()))
