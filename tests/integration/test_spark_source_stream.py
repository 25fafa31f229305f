"""The ``headwater`` Spark source in streaming mode: read limits, availableNow, restart
from a checkpoint location, over a task directory and over HTTP.

Batches are recorded with ``foreachBatch``; queries end by ``trigger(availableNow=True)``
or ``processAllAvailable()``, never by sleeping.
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
from tests.integration.spark_source_support import (
    TASK,
    Captured,
    append,
    capture,
    copy_task,
    rows_of,
)


@pytest.fixture(scope="module")
def captured(mariadb: MariadbSandbox, tmp_path_factory: pytest.TempPathFactory) -> Captured:
    return capture(mariadb, tmp_path_factory.mktemp("spark_source"))


@pytest.fixture(scope="module")
def hw(spark: Any) -> Any:
    register(spark)
    return spark


class Recorder:
    """Collects each micro-batch's rows (foreachBatch runs on the driver)."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[Any, ...]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append(rows_of(df))

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        return [row for batch in self.batches for row in batch]


def run_available_now(stream: Any, checkpoint: Path) -> Recorder:
    recorder = Recorder()
    query = (
        stream.writeStream.foreachBatch(recorder)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return recorder


def test_max_rows_per_trigger_bounds_every_batch_and_restart_continues_exactly(
    hw: Any, captured: Captured, tmp_path: Path
) -> None:
    half = len(captured.records) // 2
    log = copy_task(captured, tmp_path / TASK, half)
    try:
        stream = (
            hw.readStream.format("headwater")
            .option("path", str(tmp_path / TASK))
            .option("maxRowsPerTrigger", "150")
            .option("partitions", "2")
            .option("minBytesPerPartition", "0")
            .load()
        )
        first = run_available_now(stream, tmp_path / "checkpoint")
        expected_first = [r for r in captured.expected() if r[12] >> 24 <= half]
        assert first.rows == expected_first
        assert len(first.batches) >= len(expected_first) // 150
        assert all(0 < len(b) <= 150 for b in first.batches)

        append(log, captured.records[half:])
        second = run_available_now(stream, tmp_path / "checkpoint")
        assert second.rows == [r for r in captured.expected() if r[12] >> 24 > half]
        assert all(0 < len(b) <= 150 for b in second.batches)
    finally:
        log.close()


def test_a_batch_may_end_inside_a_record(hw: Any, captured: Captured, tmp_path: Path) -> None:
    stream = (
        hw.readStream.format("headwater")
        .option("path", str(captured.task_dir))
        .option("maxRowsPerTrigger", "100")
        .option("startingPosition", f"seq:{len(captured.records) - 14}")
        .load()
    )
    got = run_available_now(stream, tmp_path / "checkpoint")
    expected = captured.expected(first_seq=len(captured.records) - 14)
    assert got.rows == expected
    assert len(got.batches) >= 3
    assert [len(b) for b in got.batches[:-1]] == [100] * (len(got.batches) - 1)
    ends = {(b[-1][12] >> 24) for b in got.batches[:-1]}
    starts = {(b[0][12] >> 24) for b in got.batches[1:]}
    assert ends & starts, "no batch boundary fell inside a record"


@pytest.fixture
def served(captured: Captured) -> Iterator[str]:
    handle = TaskHandle(log=captured.task_dir / "changes")
    server = HeadwaterServer({TASK: handle}, ServerOptions()).start()
    try:
        yield server.url
    finally:
        server.close()
        handle.change_log().close()


def test_stream_over_http_with_a_byte_limit(
    hw: Any, captured: Captured, served: str, tmp_path: Path
) -> None:
    recorder = Recorder()
    stream = (
        hw.readStream.format("headwater")
        .option("server", served)
        .option("task", TASK)
        .option("maxBytesPerTrigger", "65536")
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(recorder)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert recorder.rows == captured.expected()
    payload = sum(len(r.payload) for r in captured.records)
    assert len(recorder.batches) >= payload // 65536
