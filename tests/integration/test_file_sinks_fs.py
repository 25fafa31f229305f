"""The Parquet sinks on a URI path (issue #16): ``file://`` goes through the same code as a
remote store (Hadoop's ``FileSystem`` through the session's JVM on the driver, ``pyarrow.fs``
on the executors: headwater.sinks.files.fs), with the same idempotent publication per
batch as a plain path; and an executor's error that a retry cannot fix reaches the driver
as headwater's own error (headwater.sinks.failfast)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headwater.errors import SinkError
from headwater.sinks import StaticSchema
from headwater.sinks.files import MirrorConfig, ParquetChangeLog, ParquetLogConfig, ParquetMirror
from tests.integration.sink_support import items_table, row
from tests.integration.test_sink_spark import frame

pytestmark = pytest.mark.integration

DAY = 86_400_000_000


def published(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.parquet")
        if not p.relative_to(root).as_posix().startswith("_staging")
    )


def test_change_log_on_a_file_uri_publishes_and_replays_per_batch(
    spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "log"
    log = ParquetChangeLog(ParquetLogConfig(root.as_uri()))
    batch0 = [row("insert", i, "src", "items", after={"id": i}, ts_us=i * DAY) for i in range(3)]
    batch1 = [row("delete", 10, "src", "items", before={"id": 0}, ts_us=0)]
    log.write_batch(frame(spark, batch0, 3), 0)
    assert published(root) == [
        f"table_id=src.items/date=1970-01-0{d}/batch-000000000000-0.parquet" for d in (1, 2, 3)
    ]
    # A replay of batch 0 that no longer has day 3: its file of batch 0 is removed.
    log.write_batch(frame(spark, batch0[:2], 2), 0)
    log.write_batch(frame(spark, batch1, 1), 1)
    log.write_changes(batch1, 1)  # the Spark-free writer (pyarrow.fs) replaces them too
    assert published(root) == [
        "table_id=src.items/date=1970-01-01/batch-000000000000-0.parquet",
        "table_id=src.items/date=1970-01-01/batch-000000000001-0.parquet",
        "table_id=src.items/date=1970-01-02/batch-000000000000-0.parquet",
    ]
    assert list((root / "_staging").iterdir()) == []  # staging directories removed
    back = spark.read.parquet(root.as_uri()).select("sequence", "op").collect()
    assert sorted((r.sequence, r.op) for r in back) == [(0, "insert"), (1, "insert"),
                                                         (10, "delete")]  # fmt: skip


def test_mirror_on_a_file_uri_rewrites_partitions_on_the_executors(
    spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "mirror"
    table = items_table("src")
    mirror = ParquetMirror(MirrorConfig(root.as_uri(), StaticSchema((table,)), buckets=2, shards=2))
    rows = [
        row("insert", i, "src", "items", after={"id": i, "name": f"n{i}", "qty": i})
        for i in range(1, 7)
    ]
    rows.append(row("delete", 7, "src", "items", before={"id": 2, "name": "n2", "qty": 2}))
    rows.append(row("update", 8, "src", "items", {"id": 3, "name": "n3", "qty": 3},
                    {"id": 3, "name": "x", "qty": 30}))  # fmt: skip
    mirror.write_batch(frame(spark, rows[:6], 2), 0)
    mirror.write_batch(frame(spark, rows[6:], 2), 1)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("data.parquet"))
    mirror.write_batch(frame(spark, rows, 2), 0)  # an old batch again: nothing rewritten
    assert sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("data.parquet")) == before
    assert not list(root.rglob(".tmp-*"))
    path = mirror.table_path("src", "items")
    assert path == f"{root.as_uri()}/src/items"
    got = spark.read.parquet(path).select("id", "name", "qty").orderBy("id").collect()
    assert [tuple(r) for r in got] == [(1, "n1", 1), (3, "x", 30), (4, "n4", 4),
                                       (5, "n5", 5), (6, "n6", 6)]  # fmt: skip


def test_mirror_error_that_a_retry_cannot_fix_is_raised_as_headwaters_own(
    spark: Any, tmp_path: Path
) -> None:
    """No definition for the table: every attempt would fail the same way, so the
    executor returns the SinkError and the driver raises it (not Spark's wrapper)."""
    mirror = ParquetMirror(MirrorConfig((tmp_path / "m").as_uri(), StaticSchema(()), buckets=2))
    rows = [row("insert", 5, "src", "items", after={"id": 1})]
    with pytest.raises(SinkError) as caught:
        mirror.write_batch(frame(spark, rows, 1), 0)
    assert type(caught.value) is SinkError
    assert caught.value.table == "src.items" and caught.value.resume_sequence == 5
    assert "no table definition with a primary key" in str(caught.value)
