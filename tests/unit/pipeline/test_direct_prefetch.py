"""The driver path's record prefetch (headwater.pipeline.direct.Prefetch) against a real
change log written in this process and read as a reader in another process reads it:
it holds exactly the records after its cursor, the same as a read of the log, grows as
the log grows (a catch-up: at least BURST_RECORDS waiting), keeps to its bounds, and
answers None for any range it does not hold whole (or, asked for what it holds of a
range, that part, pausing when it does not reach the range's end)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from headwater.pipeline.direct import Prefetch
from headwater.position import Position
from headwater.spark.logaccess import LocalLog
from headwater.spark.offsets import parse_options
from headwater.spark.source import BURST_RECORDS
from headwater.store import ChangeLog, Record, StoreOptions


def _append(log: ChangeLog, lo: int, hi: int) -> None:
    for i in range(lo, hi):
        log.append_nowait(
            Record(
                Position(1, 1, 100 + i),
                bytes([i % 256]) * (i % 300),
                ts_us=i,
                gtid=f"0-1-{i}",
                tables=(("a.t", 1),),
            )
        )
    log.flush()


def _until(check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "prefetch did not catch up"
        time.sleep(0.005)


def test_prefetch_holds_the_records_after_its_cursor_as_the_log_reads_them(
    tmp_path: Path,
) -> None:
    task = tmp_path / "task"
    writer = ChangeLog.open(str(task / "changes"), StoreOptions(segment_bytes=64 << 10))
    options = parse_options({"path": str(task)})
    reader = LocalLog(options, decoding=False)
    prefetch = Prefetch(options, max_rows=500)
    try:
        _append(writer, 1, 201)
        assert prefetch.take(1, 2) is None  # no cursor yet: nothing read
        prefetch.follow(51)
        _until(lambda: prefetch.take(51, 201) is not None)
        assert prefetch.take(51, 201) == list(reader.records(51, 201))
        assert prefetch.take(50, 60) is None and prefetch.take(51, 202) is None
        _append(writer, 201, 401)  # the log grows: so does the cache (over segments)
        _until(lambda: prefetch.take(51, 401) is not None)
        assert prefetch.take(120, 401) == list(reader.records(120, 401))
        prefetch.follow(300)  # a batch ended at 300: what is before it goes
        assert prefetch.take(299, 300) is None
        assert prefetch.take(300, 401) == list(reader.records(300, 401))
        _append(writer, 401, 1001)  # bounded: at most max_rows records past the cursor
        _until(lambda: prefetch.take(300, 800) is not None)
        time.sleep(0.2)
        assert prefetch.take(300, 801) is None
        prefetch.follow(900)  # a cursor past the cache: it starts again from there
        _until(lambda: prefetch.take(900, 1001) is not None)
        assert prefetch.take(900, 1001) == list(reader.records(900, 1001))
        prefetch.pause()  # a batch of another path: nothing held, nothing read
        _append(writer, 1001, 1011)
        time.sleep(0.2)
        assert prefetch.take(900, 1001) is None and prefetch.take(1001, 1001) is None
        prefetch.follow(1001)  # a live workload's few records: left to the batch
        time.sleep(0.3)
        assert prefetch.take(1001, 1002) is None
        _append(writer, 1011, 1011 + BURST_RECORDS)  # a catch-up: read ahead
        _until(lambda: prefetch.take(1001, 1011 + BURST_RECORDS) is not None)
        assert prefetch.take(1001, 1011) == list(reader.records(1001, 1011))
        # A batch past what it holds takes the part it holds, which pauses it (the batch
        # reads the rest itself): nothing held, nothing read until the next follow.
        held = prefetch.take_prefix(1001, 1101 + BURST_RECORDS)
        assert held == list(reader.records(1001, 1011 + BURST_RECORDS))
        assert prefetch.take_prefix(1001, 1002) == [] and prefetch.take(1001, 1002) is None
        _append(writer, 1011 + BURST_RECORDS, 1101 + BURST_RECORDS)
        time.sleep(0.3)
        assert prefetch.take_prefix(1075, 1076) == []
        prefetch.follow(1050)
        _until(lambda: prefetch.take(1050, 1101 + BURST_RECORDS) is not None)
        # a range it holds whole: taken, the thread goes on
        assert prefetch.take_prefix(1060, 1070) == list(reader.records(1060, 1070))
        assert prefetch.take(1050, 1101 + BURST_RECORDS) is not None
        assert prefetch.take_prefix(1040, 1070) == []  # (before its cursor: none, paused)
    finally:
        prefetch.close()
        reader.close()
        writer.close()
    prefetch.follow(1005)  # and starts nothing after close
    assert prefetch._thread is None
