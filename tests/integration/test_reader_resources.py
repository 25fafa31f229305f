"""A reader process that runs out of disk or file descriptors waits it out, says so, and
resumes when the condition clears without losing or repeating a transaction.

Real conditions, not injected errors: the data directory lives on a size-limited tmpfs
that the test fills (the test runs as root; the mount is removed afterwards), and the
reader runs under ``RLIMIT_NOFILE`` 256 while 300 idle connections are held open to its
HTTP API. The oracle is the source's own binlog (``assert_same_changes``)."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.position import BinlogCoordinate
from headwater.reader.status import read_task_status
from headwater.sandbox import MariadbSandbox
from tests.integration.server_support import Http
from tests.integration.test_reader_capture import assert_same_changes, start_at, wait_for


def _config(
    path: Path, server: MariadbSandbox, start: BinlogCoordinate, db: str, **srv: object
) -> None:
    extra = "".join(f"  {k}: {v}\n" for k, v in srv.items())
    path.write_text(
        f"""data_dir: {path.parent / "fs" / "data"}
server:
  listen: "127.0.0.1:0"
{extra}sources:
  - name: r
    host: {server.host}
    port: {server.port}
    user: root
    server_id: 7401
    heartbeat_period: 0.5
    state_interval: 0.05
    start: {{file: {start.file}, offset: {start.offset}}}
    filters: {{include: ['{db}\\..*']}}
    reconnect: {{initial: 0.05, max: 0.5}}
    store: {{segment_bytes: 64KiB}}
"""
    )


def _reader(config: Path, nofile: int | None = None) -> subprocess.Popen[bytes]:
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(config.parent / "reader.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "reader", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=limit,
        )


def _url(config: Path, proc: subprocess.Popen[bytes]) -> str:
    server_json = config.parent / "fs" / "data" / "server.json"

    def ready() -> bool:
        try:
            return bool(json.loads(server_json.read_text())["pid"] == proc.pid)
        except (OSError, ValueError):
            return False

    wait_for(ready, 30, "the reader's HTTP API")
    return str(json.loads(server_json.read_text())["url"])


def _insert(server: MariadbSandbox, db: str, first: int, n: int, pad: int = 2000) -> None:
    conn = server.connect(db)
    with conn.cursor() as cur:
        for i in range(first, first + n):
            cur.execute(f"INSERT INTO t VALUES ({i}, REPEAT('x', {pad}))")
    conn.close()


def _stored(task_dir: Path) -> int:
    return int(read_task_status(task_dir).get("retention", {}).get("last_seq") or 0)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log.read_text()[-3000:]


def test_disk_full_is_backoff_in_the_status_and_capture_resumes_when_space_returns(
    mariadb: MariadbSandbox, db: str, tmp_path: Path, tmpfs: Path
) -> None:
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v TEXT)")
    start = start_at(mariadb).coordinate
    assert start is not None
    config = tmp_path / "reader.yaml"
    _config(config, mariadb, start, db)
    task_dir = tmpfs / "data" / "r"
    proc = _reader(config)
    try:
        http = Http(_url(config, proc))
        _insert(mariadb, db, 0, 50)
        wait_for(lambda: _stored(task_dir) >= 50, 30, "the first 50 transactions")
        filler = tmpfs / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        _insert(mariadb, db, 50, 300)

        def says_backoff() -> bool:
            status = read_task_status(task_dir)
            return status.get("state") == "backoff" and "No space" in str(status.get("error"))

        wait_for(says_backoff, 30, "status.json to say backoff for the full disk")
        (live,) = [http.get("/v1/info").json()["tasks"]["r"]["status"]]
        assert live["state"] == "backoff" and "No space" in live["error"]
        time.sleep(1.0)  # some retries against the full disk
        assert proc.poll() is None
        filler.unlink()
        wait_for(
            lambda: (
                read_task_status(task_dir).get("state") == "running" and _stored(task_dir) >= 350
            ),
            60,
            "capture to resume once space is back",
        )
        assert http.get("/v1/info").json()["tasks"]["r"]["status"]["state"] == "running"
        _stop(proc, tmp_path / "reader.log")
    finally:
        if proc.poll() is None:
            proc.kill()
    got = assert_same_changes(mariadb, start, task_dir, db)
    assert len(got) == 350
    assert "No space left on device" in (tmp_path / "reader.log").read_text()


def test_idle_connections_past_the_file_limit_do_not_stop_capture(
    mariadb: MariadbSandbox, db: str, tmp_path: Path, tmpfs: Path
) -> None:
    """300 idle connections under a 256-file limit: with the default ``max_connections``
    the reader keeps capturing; with the limit set above the file limit it runs out of
    descriptors (EMFILE), waits, and resumes once the connections close."""
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v TEXT)")
    start = start_at(mariadb).coordinate
    assert start is not None
    task_dir = tmpfs / "data" / "r"
    for phase, max_connections in (("bounded", None), ("unbounded", 1000)):
        config = tmp_path / "reader.yaml"
        srv = {} if max_connections is None else {"max_connections": max_connections}
        _config(config, mariadb, start, db, **srv)
        proc = _reader(config, nofile=256)
        first = 0 if phase == "bounded" else 100
        try:
            url = _url(config, proc)
            host, port = url.removeprefix("http://").rsplit(":", 1)
            wait_for(lambda: read_task_status(task_dir).get("state") == "running", 30, "running")
            idle = []
            for _ in range(300):
                with contextlib.suppress(OSError):
                    idle.append(socket.create_connection((host, int(port)), timeout=5))
            time.sleep(0.5)
            _insert(mariadb, db, first, 100, pad=10)
            if phase == "bounded":
                wait_for(lambda: _stored(task_dir) >= 100, 30, "capture under 300 idle clients")
            else:
                wait_for(
                    lambda: any(
                        "headwater.reader.task" in line and "Too many open files" in line
                        for line in (tmp_path / "reader.log").read_text().splitlines()
                    ),
                    30,
                    "the capture task to run out of file descriptors",
                )
            for s in idle:
                s.close()
            end = first + 100
            wait_for(lambda: _stored(task_dir) >= end, 60, f"capture ({phase})")  # noqa: B023
            assert Http(url).get("/v1/info").status == 200  # and new clients are served
            assert proc.poll() is None
            _stop(proc, tmp_path / "reader.log")
        finally:
            if proc.poll() is None:
                proc.kill()
    got = assert_same_changes(mariadb, start, task_dir, db)
    assert len(got) == 200
