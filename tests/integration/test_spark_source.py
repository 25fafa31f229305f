"""The ``headwater`` Spark source in batch mode, over a task directory and over HTTP.

Every test compares the DataFrame with the change rows computed independently from the
stored records (``decode_record`` + ``change_row_values``; spark_source_support.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.spark import register
from headwater.spark.offsets import parse_options
from headwater.spark.source import HeadwaterReader
from tests.integration.spark_source_support import DB, TASK, Captured, capture, rows_of


@pytest.fixture(scope="module")
def captured(mariadb: MariadbSandbox, tmp_path_factory: pytest.TempPathFactory) -> Captured:
    return capture(mariadb, tmp_path_factory.mktemp("spark_source"))


@pytest.fixture(scope="module")
def served(captured: Captured) -> Iterator[str]:
    handle = TaskHandle(log=captured.task_dir / "changes")
    server = HeadwaterServer({TASK: handle}, ServerOptions()).start()
    try:
        yield server.url
    finally:
        server.close()
        handle.change_log().close()


@pytest.fixture(scope="module")
def hw(spark: Any) -> Any:
    register(spark)
    return spark


def read_path(hw: Any, captured: Captured, **options: str) -> Any:
    return hw.read.format("headwater").option("path", str(captured.task_dir)).options(**options).load()


def test_batch_read_of_a_task_directory_equals_decode_record(hw: Any, captured: Captured) -> None:
    df = read_path(hw, captured, partitions="3")
    expected = captured.expected()
    assert len(expected) > 800
    assert df.rdd.getNumPartitions() == 3
    assert rows_of(df) == expected
    assert df.filter("unix_micros(commit_ts) != ts_us").count() == 0


def test_a_slice_boundary_falls_between_chunks_of_the_large_transaction(
    captured: Captured,
) -> None:
    reader = HeadwaterReader(parse_options({"path": str(captured.task_dir), "partitions": "4"}))
    slices = reader.partitions()
    assert len(slices) == 4
    chunked = {r.seq for r in captured.records if not r.first_chunk}
    assert len(chunked) >= 3, "the workload's large transaction was not chunked"
    assert {s.lo[0] for s in slices[1:]} & chunked
    assert [s.hi for s in slices[:-1]] == [s.lo for s in slices[1:]]


def test_batch_read_over_http_equals_decode_record(
    hw: Any, captured: Captured, served: str
) -> None:
    df = (
        hw.read.format("headwater")
        .option("server", served)
        .option("task", TASK)
        .option("partitions", "2")
        .load()
    )
    assert df.rdd.getNumPartitions() == 2
    assert rows_of(df) == captured.expected()


def test_tables_filter_keeps_the_tables_and_ddl(hw: Any, captured: Captured) -> None:
    df = read_path(hw, captured, tables=f"{DB}.typed")
    got = rows_of(df)
    assert got == captured.expected(tables=lambda d, t: (d, t) == (DB, "typed"))
    assert {(r[2], r[3]) for r in got} >= {("typed", "insert"), ("typed", "update"), ("", "ddl")}
    assert "acct" not in {r[2] for r in got}
