"""Planning a batch from record headers (scan_batch without a row limit reads
``LocalLog.heads``) picks the same end, last position and sizes as a walk over the whole
records does."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.position import Position
from headwater.spark.logaccess import LocalLog
from headwater.spark.offsets import LogOffset, parse_options
from headwater.spark.partitions import Scan, scan_batch
from headwater.store import ChangeLog, Record, StoreOptions

TABLES = ((("a.x", 1),), (("b.y", 2),), (), (("b.y", 1), ("a.z", 3)))


def build(task: Path) -> None:
    """40 records of the TABLES lists in turn, payloads of 0-2,900 bytes, over small
    segments (some records past the index interval)."""
    opts = StoreOptions(segment_bytes=16 << 10, index_interval_bytes=1 << 10)
    with ChangeLog.open(str(task / "changes"), opts) as log:
        for i in range(40):
            log.append_nowait(
                Record(
                    Position(1, 1, 100 + i),
                    bytes([i]) * (i * 73 % 2_900),
                    ts_us=i,
                    gtid=f"0-1-{i + 1}",
                    tables=TABLES[i % len(TABLES)],
                )
            )
        log.flush()


def by_records(
    log: LocalLog, tables: str | None, start: LogOffset, target: int, max_bytes: int | None
) -> Scan:
    """The walk over whole records (scan_batch's row-limit path without the limit)."""
    opts = parse_options({"path": "x", **({"tables": tables} if tables else {})})
    sizes: list[tuple[int, int]] = []
    nbytes = 0
    last = start.last_position
    for rec in log.records(start.seq, target):
        if not opts.tables.record_wanted(rec.tables):
            last = rec.position
            continue
        if max_bytes is not None and sizes and nbytes + len(rec.payload) > max_bytes:
            return Scan(LogOffset(rec.seq, 0, last), sizes, cut=True)
        sizes.append((rec.seq, len(rec.payload)))
        nbytes += len(rec.payload)
        last = rec.position
    return Scan(LogOffset(target, 0, last), sizes)


@pytest.mark.parametrize("tables", [None, "a.*", "b.y", "c.*"])
@pytest.mark.parametrize("max_bytes", [None, 1, 3_000, 20_000])
def test_scan_from_heads_equals_the_walk_over_records(
    tmp_path: Path, tables: str | None, max_bytes: int | None
) -> None:
    task = tmp_path / "task"
    build(task)
    options = parse_options({"path": str(task), **({"tables": tables} if tables else {})})
    log = LocalLog(options, decoding=False)
    try:
        end, _last = log.end()
        assert end == 41
        for first in (1, 2, 17, 40):
            start = LogOffset(first, 0, Position(9, 9, 9))
            for target in (first, first + 1, end):
                got = scan_batch(log, options, start, target, max_bytes=max_bytes)
                want = by_records(log, tables, start, target, max_bytes)
                assert got == want, (first, target)
    finally:
        log.close()


@pytest.mark.parametrize("tables", [None, "a.*"])
@pytest.mark.parametrize("max_bytes", [1, 3_000, 20_000])
def test_a_scan_resumed_as_the_log_grows_equals_one_scan(
    tmp_path: Path, tables: str | None, max_bytes: int
) -> None:
    """The source plans a landing burst as it grows (scan_batch's ``resume``): the scans
    of ever further targets end as one scan of the last target does."""
    task = tmp_path / "task"
    build(task)
    options = parse_options({"path": str(task), **({"tables": tables} if tables else {})})
    log = LocalLog(options, decoding=False)
    try:
        for first, steps in ((1, (2, 5, 9, 30, 41)), (17, (17, 18, 41)), (3, (41,))):
            start = LogOffset(first, 0, Position(9, 9, 9))
            planned = None
            for target in steps:
                planned = scan_batch(log, options, start, target, max_bytes=max_bytes,
                                     resume=planned)  # fmt: skip
                assert planned == by_records(log, tables, start, target, max_bytes), target
    finally:
        log.close()
