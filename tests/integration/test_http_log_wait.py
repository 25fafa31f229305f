"""``HttpLog.wait_past``: an idle Spark source over a reader's HTTP API waits with one
long-poll ``/v1/fetch`` instead of asking ``/v1/subscribe`` every 20 ms, returns when a
record lands, and falls back to polling on a server whose ``max_wait`` refuses the wait.
Real parts: MariaDB, a ReaderService serving HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.config import parse_reader_config
from headwater.reader.service import ReaderService
from headwater.sandbox import MariadbSandbox
from headwater.spark.logaccess import HttpLog
from headwater.spark.offsets import SourceOptions

pytestmark = pytest.mark.integration


def _service(mariadb: MariadbSandbox, db: str, data: Path, max_wait: float) -> ReaderService:
    mariadb.execute(f"CREATE TABLE IF NOT EXISTS `{db}`.t (id INT PRIMARY KEY, a INT)")
    file, offset = mariadb.binlog_position()
    config = parse_reader_config(
        f"""data_dir: {data}
server: {{listen: "127.0.0.1:0", max_wait: {max_wait}}}
sources:
  - name: live
    host: {mariadb.host}
    port: {mariadb.port}
    user: root
    server_id: {9300 + int(max_wait * 10)}
    heartbeat_period: 0.5
    start: {{file: {file}, offset: {offset}}}
    filters: {{include: ['{db}\\..*']}}
""",
        env={},
    )
    service = ReaderService(config)
    service.start()
    return service


def _counted(log: HttpLog) -> list[str]:
    """The paths of the requests ``log`` sends from now on (its own client, wrapped)."""
    paths: list[str] = []
    exchange = log._exchange

    def counting(method: str, path: str, body: Any) -> Any:
        paths.append(path)
        return exchange(method, path, body)

    log._exchange = counting  # type: ignore[method-assign]
    return paths


def _landed(log: HttpLog, n: int) -> int:
    """The log's end once it is at least ``n``. The end is one past the last seq and
    seqs start at 1, so an empty log's end is already 1: the first record is ``n = 2``."""
    deadline = time.monotonic() + 60
    while (end := log.end()[0]) < n:
        assert time.monotonic() < deadline, f"the reader stored {end} records, not {n}"
        time.sleep(0.05)
    return end


@pytest.fixture
def served(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    service = _service(mariadb, db, tmp_path / "data", 60.0)
    try:
        assert service.server is not None
        yield service.server.url, db
    finally:
        service.stop()


def test_an_idle_wait_is_one_long_poll_and_a_landing_record_ends_it(
    mariadb: MariadbSandbox, served: tuple[str, str]
) -> None:
    url, db = served
    mariadb.execute(f"INSERT INTO `{db}`.t VALUES (1, 1)")
    log = HttpLog(SourceOptions(task="live", server=url), decoding=False)
    try:
        end = _landed(log, 2)  # the first insert's record
        paths = _counted(log)
        started = time.monotonic()
        log.wait_past(end, 1.0)  # nothing lands: the whole wait, in one fetch
        assert time.monotonic() - started >= 0.9
        assert paths == ["/v1/subscribe", "/v1/fetch"]
        assert log.end()[0] == end

        paths.clear()
        timer = threading.Timer(0.3, mariadb.execute, [f"INSERT INTO `{db}`.t VALUES (2, 2)"])
        timer.start()
        try:
            log.wait_past(end, 50.0)  # ends when the insert's record lands, not at 50 s
        finally:
            timer.join()
        assert paths == ["/v1/subscribe", "/v1/fetch"]
        assert log.end()[0] > end
    finally:
        log.close()


def test_a_server_refusing_long_polls_is_polled(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    service = _service(mariadb, db, tmp_path / "data", 0.0)
    try:
        assert service.server is not None
        mariadb.execute(f"INSERT INTO `{db}`.t VALUES (1, 1)")
        log = HttpLog(SourceOptions(task="live", server=service.server.url), decoding=False)
        try:
            end = _landed(log, 2)  # the first insert's record
            paths = _counted(log)
            log.wait_past(end, 1.0)  # refused (max_wait 0): one poll step instead
            assert paths == ["/v1/subscribe", "/v1/fetch"]
            paths.clear()
            log.wait_past(end, 1.0)
            assert paths == []  # it no longer asks for long polls; the caller polls end()
            mariadb.execute(f"INSERT INTO `{db}`.t VALUES (2, 2)")
            assert _landed(log, end + 1) > end
        finally:
            log.close()
    finally:
        service.stop()
