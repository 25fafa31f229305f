"""A real ZooKeeper for tests: Debian's ``zookeeper`` package, standalone, on a free port in
a temporary directory (``make test`` installs the package; see the Makefile).

:func:`zookeeper_server` is a context manager yielding ``host:port``; tests and later
coordination work (reader leadership) share it through the ``zookeeper`` fixture
(tests/integration/conftest-free: import the fixture from this module).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["ZK_JAR", "free_port", "zookeeper", "zookeeper_server"]

ZK_JAR = Path("/usr/share/java/zookeeper.jar")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


@contextmanager
def zookeeper_server(*, tick_ms: int = 500) -> Iterator[str]:
    """Start a standalone ZooKeeper; yields ``127.0.0.1:port``; removes its data after.

    ``tick_ms`` bounds session timeouts to 2..20 ticks, so 500 ms allows 1..10 s."""
    assert ZK_JAR.exists(), "Debian's zookeeper package is missing: run make system-packages"
    root = Path(tempfile.mkdtemp(prefix="hw-zk-"))
    port = free_port()
    cfg = root / "zoo.cfg"
    cfg.write_text(
        f"tickTime={tick_ms}\ndataDir={root / 'data'}\nclientPort={port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok\nmaxSessionTimeout=20000\n"
    )
    (root / "log4j.properties").write_text("log4j.rootLogger=WARN, F\n")
    log = open(root / "zookeeper.out", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [
            shutil.which("java") or "java",
            "-Xmx256m",
            "-cp",
            f"{root}:/usr/share/java/zookeeper.jar",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not _answers(port):
            assert proc.poll() is None, (root / "zookeeper.out").read_text()[-2000:]
            assert time.monotonic() < deadline, "ZooKeeper did not start in 60 s"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[str]:
    """A ZooKeeper server for the tests of one module (``host:port``)."""
    with zookeeper_server() as hosts:
        yield hosts
