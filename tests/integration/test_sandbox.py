"""The test fixtures themselves: the sandbox server has the binlog settings tests rely on."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from headwater.sandbox import MariadbSandbox


def test_session_server_logs_rows_with_full_metadata(mariadb: MariadbSandbox) -> None:
    row = mariadb.query(
        "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata,"
        " @@binlog_checksum"
    )[0]
    assert row == (1, "ROW", "FULL", "FULL", "CRC32")


def test_binlog_settings_are_restored(mariadb: MariadbSandbox) -> None:
    with mariadb.binlog_settings(row_image="MINIMAL", metadata="MINIMAL", checksum="NONE"):
        inside = mariadb.query(
            "SELECT @@GLOBAL.binlog_row_image, @@binlog_row_metadata, @@binlog_checksum"
        )[0]
    after = mariadb.query(
        "SELECT @@GLOBAL.binlog_row_image, @@binlog_row_metadata, @@binlog_checksum"
    )[0]
    assert inside == ("MINIMAL", "MINIMAL", "NONE")
    assert after == ("FULL", "FULL", "CRC32")


def test_each_test_gets_an_empty_database(mariadb: MariadbSandbox, db: str) -> None:
    assert mariadb.query(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s", (db,)
    ) == [(0,)]


def test_factory_starts_a_statement_format_server(
    sandbox_factory: Callable[..., MariadbSandbox],
) -> None:
    server = sandbox_factory(binlog_format="STATEMENT", server_id=7)
    assert server.query("SELECT @@binlog_format, @@server_id") == [("STATEMENT", 7)]


# -- a sandbox does not outlive its owner (sandbox.py, module docstring) -----------------------

_OWNER = """
import sys, time
from headwater.sandbox import MariadbSandbox
server = MariadbSandbox().start()
if sys.argv[1] == "release":
    server.release()
print(server._proc.pid, server.dir, server.port, flush=True)
if sys.argv[1] == "release":
    sys.exit(0)
time.sleep(600)
"""


def _start_owner(mode: str) -> tuple[subprocess.Popen[str], int, Path, int]:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, mode], stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    assert owner.stdout is not None
    pid, directory, port = owner.stdout.readline().split()
    return owner, int(pid), Path(directory), int(port)


def _gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":  # exited, not yet reaped
            return True
        time.sleep(0.05)
    return False


def test_server_dies_with_its_owner_killed() -> None:
    owner, pid, directory, port = _start_owner("keep")
    try:
        assert directory.is_dir() and not _gone(pid, timeout=0.2)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the server answers while its owner lives
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        assert _gone(pid), f"mariadbd {pid} still runs after its owner was killed"
        deadline = time.monotonic() + 20
        while directory.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not directory.exists()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=30)
        assert owner.stdout is not None
        owner.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)


def test_released_server_outlives_its_owner() -> None:
    owner, pid, directory, port = _start_owner("release")
    try:
        assert owner.wait(timeout=30) == 0
        time.sleep(0.5)
        assert not _gone(pid, timeout=0.2)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert directory.is_dir()
    finally:
        assert owner.stdout is not None
        owner.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        _gone(pid)
        shutil.rmtree(directory, ignore_errors=True)


def test_stopped_server_leaves_no_watchdog() -> None:
    server = MariadbSandbox().start()
    watch = server._watch
    assert watch is not None and watch.poll() is None
    server.restart()  # a new server process: a new watchdog
    assert server._watch is not None and server._watch is not watch and watch.poll() is not None
    server.stop()
    assert server._watch is None and not server.dir.exists()
