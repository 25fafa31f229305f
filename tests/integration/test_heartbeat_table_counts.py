"""Rows per table between heartbeats (DBUS's statistic) on a live reader: a task with a
heartbeat every 0.1 s marks each heartbeat it reads; the reader's HTTP server counts the
rows per table of each interval in a fetch worker process and shows them on ``/metrics``
(``headwater_task_table_rows_total``) and ``/console``."""

from __future__ import annotations

import http.client
import time
from pathlib import Path

import pytest

from headwater.config import HeartbeatConfig
from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_for

pytestmark = pytest.mark.integration


def _get(server: HeadwaterServer, path: str) -> str:
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", path)
    body = conn.getresponse().read().decode()
    conn.close()
    return body


def test_rows_per_table_between_heartbeats_on_metrics_and_console(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    mariadb.execute(
        f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY)", f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY)"
    )
    heartbeat = f"{db}.hw_heartbeat"
    config = source_config(
        mariadb, "counts", start=start_at(mariadb), heartbeat=HeartbeatConfig(heartbeat, 0.1)
    )
    run = Running(config, tmp_path / "task")
    try:
        wait_for(lambda: run.task.store is not None and run.task.heartbeat is not None)
        handle = TaskHandle(log=run.task.store, status=run.task.status)  # type: ignore[arg-type]
        options = ServerOptions(fetch_workers=1)
        with HeadwaterServer({"counts": handle}, options).start() as server:
            counts = server.console.table_counts
            assert counts.pool is not None  # counted in the worker process
            wait_for(lambda: bool(run.task.status()["heartbeat_marks"]), 30, "a heartbeat")
            server.console.sample()  # counting starts at the newest heartbeat
            # 5 rows of a in two transactions, 3 of b, 2 updates of a
            mariadb.execute(
                f"INSERT INTO `{db}`.a VALUES (1), (2), (3)",
                f"INSERT INTO `{db}`.a VALUES (4), (5)",
                f"INSERT INTO `{db}`.b VALUES (1), (2), (3)",
                f"UPDATE `{db}`.a SET id = id + 10 WHERE id <= 2",
            )
            done_us = time.time_ns() // 1000  # heartbeats written later come after it

            def counted() -> bool:
                server.console.sample()
                intervals = counts.intervals("counts")
                return bool(intervals) and intervals[-1].end_us > done_us

            wait_for(counted, 30, "intervals past the workload")
            intervals = counts.intervals("counts")
            totals = counts.totals()["counts"]
            metrics = _get(server, "/metrics")
            page = _get(server, "/console")
    finally:
        run.stop()
    assert totals[f"{db}.a"] == 7 and totals[f"{db}.b"] == 3
    # each interval ends with its heartbeat's own row (an upsert: one row)
    assert all(i.rows.get(heartbeat) == 1 and i.complete for i in intervals)
    assert sum(i.rows.get(f"{db}.b", 0) for i in intervals) == 3
    assert f'headwater_task_table_rows_total{{task="counts",table="{db}.a"}} 7\n' in metrics
    assert '<table class="heartbeat-counts" data-task="counts">' in page
    assert f'<tr data-table="{db}.a">' in page
