"""The ``headwater`` Spark source on an idle stream: new records that the ``tables`` option
filters out run no micro-batch; the offset moves past them with the next batch that has
rows, or by itself after ``idleAdvanceMs`` (``0``: at once, in an empty batch).

The captured task's records, in order: CREATE TABLE typed, CREATE TABLE acct, three
INSERTs and an UPDATE of ``typed``, then ``acct`` transactions. Read with
``tables=spark_src.acct``, the ``typed`` records are another table's. Queries wait with
``processAllAvailable()``, which returns once the source has answered "nothing new".
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from headwater.sandbox import MariadbSandbox
from headwater.spark import register
from headwater.spark.logaccess import open_log
from headwater.spark.offsets import LogOffset, TableMatcher, parse_options
from headwater.spark.source import FilteredTail
from headwater.store import ChangeLog
from tests.integration.spark_source_support import (
    DB,
    TASK,
    Captured,
    append,
    capture,
    copy_task,
    rows_of,
)

pytestmark = pytest.mark.integration

ACCT = TableMatcher((f"{DB}.acct",))


@pytest.fixture(scope="module")
def captured(mariadb: MariadbSandbox, tmp_path_factory: pytest.TempPathFactory) -> Captured:
    return capture(mariadb, tmp_path_factory.mktemp("spark_source"))


@pytest.fixture(scope="module")
def hw(spark: Any) -> Any:
    register(spark)
    return spark


def layout(captured: Captured) -> tuple[int, int]:
    """``(first, end)``: records ``[first, end)`` (0-based indexes) are the ``typed`` ones
    after CREATE TABLE acct, and record ``end`` is the first ``acct`` transaction."""
    names = [{name for name, _rows in rec.tables} for rec in captured.records]
    assert names[0] == {f"{DB}.typed"} and names[1] == {f"{DB}.acct"}
    end = next(i for i in range(2, len(names)) if names[i] == {f"{DB}.acct"})
    assert end > 2 and all(n == {f"{DB}.typed"} for n in names[2:end])
    return 2, end


class Recorder:
    """Each micro-batch's id and rows (foreachBatch runs on the driver)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[Any, ...]]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append((batch_id, rows_of(df)))


def start(hw: Any, task_dir: Path, checkpoint: Path, recorder: Recorder, **options: str) -> Any:
    reader = hw.readStream.format("headwater").option("path", str(task_dir))
    reader = reader.option("tables", f"{DB}.acct")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.foreachBatch(recorder)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def end_seq(query: Any, batch_id: int) -> int:
    """The end offset's seq of the query's batch ``batch_id``."""
    import orjson

    for p in query.recentProgress:
        if p["batchId"] == batch_id and p["numInputRows"] >= 0:
            end = p["sources"][0]["endOffset"]
            return int((orjson.loads(end) if isinstance(end, str) else end)["seq"])
    raise AssertionError(f"no progress of batch {batch_id}")


def expected(captured: Captured, first: int, end: int) -> list[tuple[Any, ...]]:
    """The acct rows of records ``[first, end)`` (0-based indexes; seq = index + 1)."""
    return [r for r in captured.expected(tables=ACCT) if first < r[12] >> 24 <= end]


def test_other_tables_records_run_no_batch_and_the_next_batch_moves_past_them(
    hw: Any, captured: Captured, tmp_path: Path
) -> None:
    first, end = layout(captured)
    log = copy_task(captured, tmp_path / TASK, first)
    recorder = Recorder()
    query = start(hw, tmp_path / TASK, tmp_path / "checkpoint", recorder)
    try:
        query.processAllAvailable()
        assert [rows for _id, rows in recorder.batches] == [expected(captured, 0, first)]
        assert end_seq(query, recorder.batches[-1][0]) == first + 1

        append(log, captured.records[first:end])  # only the typed table's records
        query.processAllAvailable()
        query.processAllAvailable()
        assert len(recorder.batches) == 1, "an unwanted record ran a micro-batch"

        append(log, captured.records[end : end + 1])  # the first acct transaction
        query.processAllAvailable()
        assert len(recorder.batches) == 2
        batch_id, rows = recorder.batches[1]
        assert rows == expected(captured, end, end + 1)
        assert rows, "the acct transaction has rows"
        assert end_seq(query, batch_id) == end + 2
    finally:
        query.stop()
        log.close()


def test_idle_advance_zero_moves_past_unwanted_records_in_an_empty_batch(
    hw: Any, captured: Captured, tmp_path: Path
) -> None:
    first, end = layout(captured)
    log = copy_task(captured, tmp_path / TASK, first)
    recorder = Recorder()
    query = start(hw, tmp_path / TASK, tmp_path / "checkpoint", recorder, idleAdvanceMs="0")
    try:
        query.processAllAvailable()
        assert len(recorder.batches) == 1
        append(log, captured.records[first:end])
        query.processAllAvailable()
        assert len(recorder.batches) == 2
        batch_id, rows = recorder.batches[1]
        assert rows == []
        assert end_seq(query, batch_id) == end + 1
    finally:
        query.stop()
        log.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_filtered_tail_is_due_after_its_interval_and_rescans_only_new_records(
    captured: Captured, tmp_path: Path
) -> None:
    first, end = layout(captured)
    log: ChangeLog = copy_task(captured, tmp_path / TASK, first + 1)
    options = parse_options({"path": str(tmp_path / TASK), "tables": f"{DB}.acct"})
    changelog = open_log(options)
    reads: list[int] = []
    heads = changelog.heads  # (the tail reads record headers only)

    def counted(lo: int, hi: int) -> Any:
        for head in heads(lo, hi):
            reads.append(head.seq)
            yield head

    changelog.heads = counted  # type: ignore[method-assign]  # counts the real log's reads
    clock = Clock()
    tail = FilteredTail(options.tables, advance_s=60.0, clock=clock)
    begin = LogOffset(first + 1)
    try:
        assert not tail.wanted(changelog, begin, first + 2)
        assert not tail.due()
        clock.now += 59.9
        assert not tail.due()
        append(log, captured.records[first + 1 : end])
        assert not tail.wanted(changelog, begin, end + 1)
        assert reads == list(range(first + 1, end + 1)), "a record was read twice"
        clock.now += 0.1
        assert tail.due()
        append(log, captured.records[end : end + 1])
        assert tail.wanted(changelog, begin, end + 2)
        assert reads[-1] == end + 1
        # a new offset starts a new interval
        assert not tail.wanted(changelog, LogOffset(end + 2), end + 2)
        assert not tail.due()
        # a batch that ended inside a record leaves wanted rows in it
        assert tail.wanted(changelog, LogOffset(end + 1, 1), end + 2)
    finally:
        changelog.close()
        log.close()


def test_idle_waits_lengthen_after_a_while_and_new_records_end_one_at_once(
    captured: Captured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``latestOffset`` of an idle stream (module docstring of headwater.spark.source,
    "Idle"), in this process on a real task directory, its times shortened: short waits
    first, long ones once the stream has been idle a while; a wanted record appended
    during a long wait ends it (the store's head watch), and the wait after data is a
    short one again."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from headwater.spark import source

    monkeypatch.setattr(source, "IDLE_WAIT_S", 0.1)
    monkeypatch.setattr(source, "IDLE_WAIT_MAX_S", 0.5)
    monkeypatch.setattr(source, "IDLE_LONG_AFTER_S", 0.25)
    _first, end = layout(captured)
    log = copy_task(captured, tmp_path / TASK, end)
    options = parse_options({"path": str(tmp_path / TASK), "tables": f"{DB}.acct"})
    reader = source.HeadwaterStreamReader(options)
    start = LogOffset(end + 1).to_dict()

    def timed(begin: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        t0 = time.monotonic()
        answer = reader.latestOffset(begin, ReadAllAvailable())
        return time.monotonic() - t0, answer

    try:
        waits = []
        for _ in range(5):
            took, answer = timed(start)
            assert answer == start
            waits.append(took)
        # 0.1 s waits until 0.25 s of "nothing new" (the third ends at 0.3), then 0.5 s
        for took, nominal in zip(waits, (0.1, 0.1, 0.1, 0.5, 0.5), strict=True):
            assert nominal - 0.03 <= took < nominal + 0.25, waits
        timer = threading.Timer(0.1, append, (log, captured.records[end : end + 1]))
        timer.start()
        took, answer = timed(start)  # a 0.5 s wait, ended by the acct transaction
        timer.join()
        assert LogOffset.from_dict(answer).seq == end + 2
        assert took < 0.4, took
        took, again = timed(answer)
        assert again == answer
        assert 0.07 <= took < 0.35, took  # a short wait again
    finally:
        reader.stop()
        log.close()


def test_an_idle_query_stops_without_waiting_out_its_idle_wait(
    hw: Any, captured: Captured, tmp_path: Path
) -> None:
    """After 5 idle seconds ``latestOffset`` waits IDLE_WAIT_MAX_S (4 s) in the source's
    Python process; ``query.stop()`` interrupts the stream thread's read from it instead
    of waiting for the answer."""
    first, _end = layout(captured)
    log = copy_task(captured, tmp_path / TASK, first)
    recorder = Recorder()
    query = start(hw, tmp_path / TASK, tmp_path / "checkpoint", recorder)
    try:
        query.processAllAvailable()
        time.sleep(6.0)  # 0.5 s waits for about 5 s, then a 4 s one (until about 9 s)
    finally:
        t0 = time.monotonic()
        query.stop()
        stopped = time.monotonic() - t0
        log.close()
    assert not query.isActive
    assert len(recorder.batches) == 1
    assert stopped < 1.5, f"stop took {stopped:.2f} s"
