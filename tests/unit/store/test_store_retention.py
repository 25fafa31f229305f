"""Retention by age and size, compression of old sealed segments, and their readers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from headwater.errors import CorruptRecordError, PositionNotRetainedError
from headwater.position import MysqlGtidSet, Position
from headwater.store import AtSeq, AtTime, ChangeLog
from headwater.store.segment import IDX, ZSEG, segment_name

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
NOW = 10**15  # far after every test timestamp (1000 * i microseconds)


def fill(log: ChangeLog, rec, lo: int, hi: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(lo, hi):
        log.append_nowait(rec(i))
    log.flush()


def test_retention_by_size_deletes_oldest_whole_segments(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(retention_bytes=8000)) as log:
        fill(log, rec, 1, 201)
        before = log.segments()
        deleted = log.apply_retention(NOW)
        after = log.segments()
        assert deleted == [m.path for m in before[: len(deleted)]]
        assert len(deleted) > 0
        assert sum(m.file_bytes for m in after) <= 8000 or len(after) == 1
        for path in deleted:
            assert not os.path.exists(path)
            assert not os.path.exists(path[:-4] + IDX)
        assert [r.seq for r in log.reader()] == list(range(after[0].base, 201))


def test_retention_by_age_uses_newest_record_of_each_segment(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(retention_age_s=0.05)) as log:
        fill(log, rec, 1, 201)
        segs = log.segments()
        cut = segs[3].footer.max_ts  # type: ignore[union-attr]
        deleted = log.apply_retention(now_us=cut + 50_000 + 1)
        assert deleted == [m.path for m in segs[:4]]
        assert log.earliest().seq == segs[4].base  # type: ignore[union-attr]


def test_active_segment_is_never_deleted(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(retention_bytes=1, retention_age_s=0.0)) as log:
        fill(log, rec, 1, 101)
        log.apply_retention(NOW)
        (only,) = log.segments()
        assert only.footer is None
        assert log.append(rec(101)) == 101


def test_reader_inside_deleted_data_gets_clear_error(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(retention_bytes=6000)) as log:
        fill(log, rec, 1, 201)
        early = log.reader()
        assert early.next(0).seq == 1  # type: ignore[union-attr]
        log.apply_retention(NOW)
        first = log.segments()[0].base
        with pytest.raises(PositionNotRetainedError, match="no longer retained"):
            early.next(0)
        with pytest.raises(PositionNotRetainedError):
            log.reader(AtSeq(first - 1))
        with pytest.raises(PositionNotRetainedError):
            log.reader(Position(1, 1, 100 * (first - 1)))
        with pytest.raises(PositionNotRetainedError):
            log.reader(AtTime(1000 * (first - 1)))
        with pytest.raises(PositionNotRetainedError):
            log.reader(MysqlGtidSet.parse(f"{UUID}:1-2"))
        assert log.reader(MysqlGtidSet.parse(f"{UUID}:1-{first + 5}")).next().seq == first + 6  # type: ignore[union-attr]
        assert log.reader(Position(1, 1, 100 * first)).next().seq == first  # type: ignore[union-attr]


def test_retention_survives_reopen(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(retention_bytes=6000)) as log:
        fill(log, rec, 1, 201)
        log.apply_retention(NOW)
        first = log.segments()[0].base
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert [r.seq for r in log.reader()] == list(range(first, 201))
        with pytest.raises(PositionNotRetainedError):
            log.reader(MysqlGtidSet.parse(f"{UUID}:1-2"))
        assert log.append(rec(201)) == 201


def test_compressed_segments_stay_readable_by_every_lookup(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(compress_after_s=1.0)) as log:
        fill(log, rec, 1, 301)
        sealed = [m for m in log.segments() if m.footer is not None]
        zpaths = log.compress_sealed(NOW)
        assert len(zpaths) == len(sealed)
        assert all(m.compressed for m in log.segments()[:-1])
        assert all(p.endswith(ZSEG) for p in zpaths)
        got = list(log.reader())
        assert [r.payload for r in got] == [rec(i).payload for i in range(1, 301)]
        for i in (1, 77, 150, 299):
            assert log.reader(Position(1, 1, 100 * i)).next().seq == i  # type: ignore[union-attr]
            assert log.reader(AtTime(1000 * i)).next().seq == i  # type: ignore[union-attr]
            gs = MysqlGtidSet.parse(f"{UUID}:1-{i}")
            assert log.reader(gs).next().seq == i + 1  # type: ignore[union-attr]
        assert log.compress_sealed(NOW) == []
    total_z = sum(os.path.getsize(p) for p in zpaths)
    assert total_z < sum(m.file_bytes for m in sealed)
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.problems == []
        assert [r.seq for r in log.reader()] == list(range(1, 301))


def test_compression_only_touches_old_segments(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(compress_after_s=0.1)) as log:
        fill(log, rec, 1, 201)
        segs = log.segments()
        cut = segs[2].footer.max_ts  # type: ignore[union-attr]
        done = log.compress_sealed(now_us=cut + 100_000 + 1)
        assert done == [str(tmp_path / segment_name(m.base, ZSEG)) for m in segs[:3]]


def test_reader_open_on_plain_file_keeps_reading_after_compression(
    tmp_path: Path, opts, rec
) -> None:
    with ChangeLog.open(str(tmp_path), opts(compress_after_s=0.0)) as log:
        fill(log, rec, 1, 101)
        r = log.reader()
        assert r.next(0).seq == 1  # type: ignore[union-attr]
        log.compress_sealed(NOW)
        assert [x.seq for x in r] == list(range(2, 101))


def test_damaged_compressed_block_is_reported(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(compress_after_s=0.0)) as log:
        fill(log, rec, 1, 101)
        (zpath, *_rest) = log.compress_sealed(NOW)
    data = bytearray(Path(zpath).read_bytes())
    data[40] ^= 0xFF
    Path(zpath).write_bytes(bytes(data))
    with ChangeLog.open(str(tmp_path), opts()) as log:
        with pytest.raises(CorruptRecordError) as ei:
            list(log.reader())
        assert ei.value.path == zpath and ei.value.offset == 8
        assert [p.path for p in log.problems] == [zpath]
        assert os.path.exists(zpath + ".bad") and not os.path.exists(zpath)
        assert log.verify() == []


def test_damaged_compressed_trailer_sets_segment_aside(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(compress_after_s=0.0)) as log:
        fill(log, rec, 1, 101)
        (zpath, *_rest) = log.compress_sealed(NOW)
    data = bytearray(Path(zpath).read_bytes())
    data[-10] ^= 0xFF
    Path(zpath).write_bytes(bytes(data))
    with ChangeLog.open(str(tmp_path), opts()) as log:
        (problem,) = log.problems
        assert problem.path == zpath
        assert os.path.exists(zpath + ".bad")


def test_the_writer_applies_retention_and_compression_by_itself(tmp_path: Path) -> None:
    # No call to apply_retention or compress_sealed: the maintenance thread does both.
    from headwater.store import Record, StoreOptions

    options = StoreOptions(
        segment_bytes=4096,
        retention_bytes=12 * 1024,
        retention_age_s=None,
        compress_after_s=0.0,
        maintenance_interval_s=0.05,
        roll_interval_s=None,
    )
    log = ChangeLog.open(str(tmp_path), options)
    try:
        for i in range(200):
            log.append(Record(Position(0, 1, 4 + 100 * i), b"x" * 300, ts_us=1))

        def done() -> bool:
            first = log.earliest()
            compressed = any(n.endswith(".zseg") for n in os.listdir(tmp_path))
            return compressed and first is not None and first.seq > 1

        deadline = time.monotonic() + 10
        while not done() and time.monotonic() < deadline:  # bounded wait for the thread
            time.sleep(0.02)
        earliest = log.earliest()
        assert earliest is not None and earliest.seq > 1  # old segments were deleted
        assert any(n.endswith(".zseg") for n in os.listdir(tmp_path))  # sealed ones compressed
        with log.reader("earliest") as reader:
            records = list(reader)
        assert [r.seq for r in records] == list(range(earliest.seq, 201))
    finally:
        log.close()


def test_maintenance_interval_must_be_positive() -> None:
    from headwater.store import StoreOptions

    with pytest.raises(ValueError, match="maintenance_interval_s"):
        StoreOptions(maintenance_interval_s=0)


def test_heads_match_the_records_in_every_kind_of_segment(tmp_path: Path, opts, rec) -> None:
    """LogReader.heads: the header fields and payload size of each record, the same from
    compressed and plain segments, the writer's memory tail and a read-only process."""
    from headwater.store.record import RecordHead

    with ChangeLog.open(str(tmp_path), opts(compress_after_s=1.0)) as log:
        fill(log, rec, 1, 301)
        assert log.compress_sealed(NOW)
        want = [RecordHead.of(r) for r in log.reader()]
        assert [h.seq for h in want] == list(range(1, 301))
        assert list(log.reader().heads()) == want
        assert list(log.reader(AtSeq(150)).heads()) == want[149:]
        ro = ChangeLog.open(str(tmp_path), opts(), read_only=True)
        try:
            assert list(ro.reader().heads()) == want
            assert list(ro.reader(AtSeq(299)).heads()) == want[298:]
        finally:
            ro.close()
