"""First start from ``earliest`` and from a timestamp, and the schema history of a start in
the past (information_schema describes *now*; the log's DDL is replayed over it).

One fresh server (``binlog_row_metadata=MINIMAL``: TABLE_MAPs carry no column names, so
names come from the schema history alone) holds a log that begins before its tables
existed: CREATE, rows, ALTER ADD, rows, ALTER DROP, rows -- then, in a second binlog file,
transactions logged with a session timestamp far in the future.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from headwater.changes import decode_record
from headwater.config import StartConfig
from headwater.sandbox import MariadbSandbox
from headwater.schema.history import SchemaHistory
from tests.integration.test_reader_capture import (
    Running,
    source_config,
    stored_records,
    wait_caught_up,
)

FUTURE = int(time.time()) + 100_000  # the second file's transactions claim this time


@pytest.fixture
def server(sandbox_factory: Any) -> MariadbSandbox:
    server: MariadbSandbox = sandbox_factory(server_id=41, binlog_row_metadata="MINIMAL")
    conn = server.connect()
    with conn.cursor() as cur:
        for sql in (
            "CREATE DATABASE s",
            "CREATE TABLE s.t (id INT UNSIGNED PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO s.t VALUES (1, 'a')",
            "ALTER TABLE s.t ADD COLUMN w INT UNSIGNED",
            "INSERT INTO s.t VALUES (2, 'b', 4294967295)",
            "ALTER TABLE s.t DROP COLUMN v",
            "INSERT INTO s.t VALUES (3, 5)",
            "FLUSH BINARY LOGS",
            f"SET TIMESTAMP = {FUTURE}",
            "INSERT INTO s.t VALUES (10, 10)",
            "INSERT INTO s.t VALUES (11, 11)",
            f"SET TIMESTAMP = {FUTURE + 60}",
            "INSERT INTO s.t VALUES (12, 12)",
        ):
            cur.execute(sql)
    conn.close()
    return server


def _run(server: MariadbSandbox, name: str, start: StartConfig, task_dir: Path) -> None:
    run = Running(source_config(server, name, start=start), task_dir)
    try:
        wait_caught_up(run.task, server)
    finally:
        run.stop()


def _changes(task_dir: Path) -> list[tuple[str, str, Any, Any]]:
    with SchemaHistory.open(task_dir / "schema.jsonl") as history:
        return [
            (c.gtid, c.op, c.before, c.after)
            for rec in stored_records(task_dir)
            for c in decode_record(rec, source="t", fde=None, schema=history)
        ]


def test_earliest_stores_the_first_transaction_and_replays_ddl_before_data(
    server: MariadbSandbox, tmp_path: Path
) -> None:
    _run(server, "earliest", StartConfig("earliest"), tmp_path / "e")
    records = stored_records(tmp_path / "e")
    assert records[0].gtid == "0-41-1"  # CREATE DATABASE: the log's first transaction
    assert records[0].position.file_num == 1
    changes = _changes(tmp_path / "e")
    assert changes[0] == ("0-41-1", "ddl", None, None)
    rows = [(gtid, after) for gtid, op, _b, after in changes if op == "insert"]
    # Information_schema knows only (id, w); the replayed CREATE and ALTERs give each
    # row the columns in force when it was logged.
    assert rows[:3] == [
        ("0-41-3", {"id": 1, "v": "a"}),
        ("0-41-5", {"id": 2, "v": "b", "w": 4294967295}),
        ("0-41-7", {"id": 3, "w": 5}),
    ]
    assert [after["id"] for _g, after in rows[3:]] == [10, 11, 12]


def test_timestamp_start_stores_from_the_first_transaction_at_or_after_it(
    server: MariadbSandbox, tmp_path: Path
) -> None:
    start = StartConfig("timestamp", ts_us=(FUTURE + 1) * 1_000_000)
    _run(server, "from-time", start, tmp_path / "t")
    records = stored_records(tmp_path / "t")
    # Transactions at FUTURE are before the start; the first at or after it is id 12.
    assert [r.ts_us // 1_000_000 for r in records] == [FUTURE + 60]
    changes = _changes(tmp_path / "t")
    assert [(op, after) for _g, op, _b, after in changes] == [("insert", {"id": 12, "w": 12})]
    # The reader started in the second binlog file (chosen by its creation time).
    assert records[0].position.file_num == 2
