"""The reader's compiled fast path against its Python path, on a live server.

The type catalog's workload (every column type MariaDB logs, NULLs and edge values,
multi-row INSERT, UPDATE, DELETE; FULL, MINIMAL and NOBLOB row images) plus single-row
autocommit transactions and multi-table transactions is read by two tasks from the same
start: one as configured (the native scanner takes the common transactions), one with
``HEADWATER_NATIVE=0`` (every event through ``Grouper.feed``). Their change logs must hold
the same records, and the native one must have taken most transactions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.config import StartConfig
from headwater.sandbox import MariadbSandbox
from tests.integration.test_reader_capture import (
    Running,
    source_config,
    start_at,
    stored_records,
    wait_caught_up,
)
from tests.integration.test_reader_row_counts import _workload


def _more(server: MariadbSandbox, db: str) -> None:
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(300), n BIGINT)")
            cur.execute("CREATE TABLE b (id INT PRIMARY KEY, t TEXT, d DATETIME(6) NULL)")
            for i in range(300):
                cur.execute(f"INSERT INTO a VALUES ({i}, REPEAT('x', {i}), {i * 7})")
            conn.begin()
            for i in range(50):
                cur.execute(f"INSERT INTO b VALUES ({i}, REPEAT('t', {i * 40}), NOW(6))")
                cur.execute(f"UPDATE a SET n = n + 1 WHERE id = {i}")
            conn.commit()
            cur.execute("DELETE FROM a WHERE id % 3 = 0")
    finally:
        conn.close()


def _records(
    server: MariadbSandbox, config_name: str, start: StartConfig, task_dir: Path
) -> tuple[int, list[tuple[object, ...]]]:
    config = source_config(server, config_name, start=start)
    run = Running(config, task_dir)
    try:
        wait_caught_up(run.task, server, timeout=120)
        native = run.task._grouper.native_transactions
    finally:
        run.stop()
    records = [
        (
            r.seq,
            r.position,
            r.payload,
            r.ts_us,
            r.gtid,
            r.tables,
            r.schema_version,
            r.flags,
            r.chunk_no,
        )
        for r in stored_records(task_dir)
    ]
    return native, records


def test_native_and_python_paths_store_the_same_records(
    mariadb: MariadbSandbox, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = start_at(mariadb)
    _workload(mariadb, db)
    _more(mariadb, db)
    native, fast = _records(mariadb, "native", start, tmp_path / "native")
    monkeypatch.setenv("HEADWATER_NATIVE", "0")
    none, slow = _records(mariadb, "python", start, tmp_path / "python")
    assert none == 0
    assert len(slow) > 400
    assert fast == slow
    assert native > 300
