"""The ``headwater`` Spark source in batch mode, over a task directory and over HTTP.

Every test compares the DataFrame with the change rows computed independently from the
stored records (``decode_record`` + ``change_row_values``; spark_source_support.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.spark import register, table_changes
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
    return (
        hw.read.format("headwater").option("path", str(captured.task_dir)).options(**options).load()
    )


def test_batch_read_of_a_task_directory_equals_decode_record(hw: Any, captured: Captured) -> None:
    df = read_path(hw, captured, partitions="3", minBytesPerPartition="0")
    expected = captured.expected()
    assert len(expected) > 800
    assert df.rdd.getNumPartitions() == 3
    assert rows_of(df) == expected
    assert df.filter("unix_micros(commit_ts) != ts_us").count() == 0


def test_a_slice_boundary_falls_between_chunks_of_the_large_transaction(
    captured: Captured,
) -> None:
    reader = HeadwaterReader(
        parse_options(
            {"path": str(captured.task_dir), "partitions": "4", "minBytesPerPartition": "0"}
        )
    )
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
        .option("minBytesPerPartition", "0")
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


def _source_rows(mariadb: MariadbSandbox) -> dict[int, dict[str, Any]]:
    conn = mariadb.connect(DB)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SELECT * FROM typed ORDER BY id")
            names = [d[0] for d in cur.description]
            return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}
    finally:
        conn.close()


def test_table_changes_types_equal_the_source_rows(
    hw: Any, captured: Captured, mariadb: MariadbSandbox
) -> None:
    from pyspark.sql import functions as F

    df = read_path(hw, captured)
    view = table_changes(df, f"{DB}.typed", schema=captured.task_dir)
    after = view.schema["after"].dataType
    assert [f.name for f in after.fields][:3] == ["id", "i", "ti"]
    assert str(after["id"].dataType) == "DecimalType(20,0)"
    assert str(after["dt"].dataType) == "TimestampNTZType()"
    rows = view.withColumn("after_ts_us", F.unix_micros("after.ts")).orderBy("sequence").collect()
    assert [r.op for r in rows] == ["insert", "insert", "insert", "update"]
    assert (rows[3].before.u8, rows[3].after.u8) == ("", "upd\u00e9")
    assert (rows[3].before.i, rows[3].after.i) == (2147483647, 2147483646)
    final = {int(r.after.id): (r.after.asDict(), r.after_ts_us) for r in rows}
    source = _source_rows(mariadb)
    assert set(final) == set(source) == {0, 7, 18446744073709551615}
    epoch = dt.datetime(1970, 1, 1)
    for key, want in source.items():
        got, got_ts_us = final[key]
        got = dict(got)
        # TIMESTAMP: an instant; compared as microseconds (the session and query are UTC)
        want_ts = want.pop("ts")
        del got["ts"]
        assert got_ts_us == (
            None if want_ts is None else (want_ts - epoch) // dt.timedelta(microseconds=1)
        )
        if got["b"] is not None:
            got["b"] = bytes(got["b"])
        if got["s"] is not None:
            got["s"] = set(got["s"])
        if want["bt"] is not None:
            want["bt"] = int.from_bytes(want["bt"], "big")
        if isinstance(want["s"], str):
            want["s"] = set(want["s"].split(",")) - {""}
        assert got == want, key
    assert final[18446744073709551615][0]["tm"] == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert final[0][0]["tm"] == dt.timedelta(hours=100, microseconds=50000)
    assert final[18446744073709551615][0]["dt"] == dt.datetime(2024, 2, 29, 13, 1, 2, 500001)


def test_starting_position_variants_select_the_same_first_record(
    hw: Any, captured: Captured
) -> None:
    rec, before = captured.records[20], captured.records[19]
    assert rec.first_chunk and rec.last_chunk
    pos = rec.position
    at_ts = min(r.seq for r in captured.records if r.ts_us >= rec.ts_us)
    iso = dt.datetime.fromtimestamp(rec.ts_us / 1e6, dt.UTC).isoformat()
    variants = {
        f"seq:{rec.seq}": rec.seq,
        f"position:{pos}": rec.seq,
        orjson.dumps(pos.to_json()).decode(): rec.seq,
        f"mysql-bin.{pos.file_num:06d}:{pos.offset}": rec.seq,
        f"gtid:{before.gtid}": rec.seq,
        f"timestamp:{iso}": at_ts,
        f"timestamp:{rec.ts_us}": at_ts,
    }
    for start, first_seq in variants.items():
        df = read_path(hw, captured, startingPosition=start)
        assert rows_of(df) == captured.expected(first_seq=first_seq), start
    assert read_path(hw, captured, startingPosition="latest").count() == 0


def test_ending_position_bounds_a_batch_read(hw: Any, captured: Captured) -> None:
    df = read_path(hw, captured, startingPosition="seq:11", endingPosition="seq:21")
    want = [r for r in captured.expected(first_seq=11) if r[12] >> 24 < 21]
    assert want
    assert rows_of(df) == want
