"""The burst gate's byte rule (headwater.spark.source.BurstGate, ``size``): after an idle
stream, fewer than BURST_RECORDS new records are a live workload's commit, cut at once,
unless they hold BURST_BYTES of payload (a catch-up of large transactions shows one
record at its first look), which is waited for as a burst. Scripted, then on a real
change log through the stream reader's ``latestOffset`` (no Spark session)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable

from headwater.position import Position
from headwater.spark.logaccess import LocalLog
from headwater.spark.offsets import parse_options
from headwater.spark.source import (
    BURST_BYTES,
    BURST_RECORDS,
    CATCH_UP_LAG_S,
    EARLY_QUIET,
    BurstGate,
    HeadwaterStreamReader,
    _behind,
    _payload,
)
from headwater.store import ChangeLog, Record


class _Log:
    """Records land at given times (s after 100.0) with given payload sizes; ``wait``
    sleeps until the next landing past ``end`` or the timeout, as the head file's watch."""

    def __init__(self, landings: list[tuple[float, int]], sizes: dict[int, int]) -> None:
        self.now = 100.0
        self.landings = landings  # (time, end from then on)
        self.sizes = sizes  # seq -> payload bytes
        self.waits = 0
        self.sized: list[tuple[int, int]] = []

    def end(self) -> int:
        ends = [e for t, e in self.landings if 100.0 + t <= self.now + 1e-9]
        return ends[-1] if ends else 0

    def wait(self, end: int, timeout: float) -> None:
        self.waits += 1
        later = [100.0 + t for t, e in self.landings if e > end and 100.0 + t > self.now]
        self.now = min([self.now + timeout, *later])

    def size(self, begin: int, end: int) -> int:
        self.sized.append((begin, end))
        return sum(self.sizes.get(s, 100) for s in range(begin, end))


def _gate(log: _Log) -> BurstGate:
    return BurstGate(0.2, 0.05, clock=lambda: log.now, sleep=lambda s: None)


def test_one_large_record_after_an_idle_stream_is_waited_for_as_a_burst() -> None:
    # One 1000-row transaction's record (57 KB), the rest of the catch-up 30 ms later.
    log = _Log([(0.0, 11), (0.03, 40), (0.06, 75)], {10: 57_000})
    gate = _gate(log)
    assert gate.settle(11, log.end, begin=10, wait=log.wait, size=log.size) == 75
    assert log.sized == [(10, 11)]
    assert round(log.now - 100.0, 3) == 0.11  # 50 ms after the last landing


def test_the_quiet_period_is_longer_until_the_burst_has_many_records() -> None:
    # A restarted reader: its first record alone, its next group commit 100 ms later (a
    # pause past the 50 ms quiet period), then groups 30 ms apart.
    first = 11
    later = first + BURST_RECORDS + 20
    log = _Log([(0.0, first), (0.1, first + 30), (0.13, later)], {10: 57_000})
    assert _gate(log).settle(first, log.end, begin=10, wait=log.wait, size=log.size) == later
    assert round(log.now - 100.0, 3) == 0.18  # then the usual 50 ms after the last landing
    # EARLY_QUIET (3) times 50 ms: a pause of 160 ms still cuts the burst
    log = _Log([(0.0, first), (0.16, later)], {10: 57_000})
    assert _gate(log).settle(first, log.end, begin=10, wait=log.wait, size=log.size) == first
    assert round(log.now - 100.0, 3) == round(0.05 * EARLY_QUIET, 3) == 0.15


def test_small_records_after_an_idle_stream_are_cut_at_once() -> None:
    log = _Log([(0.0, 13), (0.03, 14)], {10: 900, 11: 900, 12: 900})
    gate = _gate(log)
    assert gate.settle(13, log.end, begin=10, wait=log.wait, size=log.size) == 13
    assert log.waits == 0 and log.now == 100.0 and log.sized == [(10, 13)]
    # Just under the limit in all: still a commit; at the limit: a burst.
    log = _Log([(0.0, 12), (0.02, 30)], {10: BURST_BYTES // 2, 11: BURST_BYTES // 2 - 1})
    assert _gate(log).settle(12, log.end, begin=10, wait=log.wait, size=log.size) == 12
    log = _Log([(0.0, 12), (0.02, 30)], {10: BURST_BYTES // 2, 11: BURST_BYTES // 2})
    assert _gate(log).settle(12, log.end, begin=10, wait=log.wait, size=log.size) == 30


def test_sizes_are_not_read_when_the_stream_is_busy_or_many_records_landed() -> None:
    log = _Log([(0.0, 11), (0.03, 12)], {10: 57_000, 11: 57_000})
    gate = _gate(log)
    gate.idle = False  # a batch ran just before: the next is cut at once, unsized
    assert gate.settle(11, log.end, begin=10, wait=log.wait, size=log.size) == 11
    assert log.sized == [] and log.waits == 0
    # BURST_RECORDS records at the first look are a burst by their count alone.
    first = 10 + BURST_RECORDS
    log = _Log([(0.0, first), (0.01, first + 5)], {})
    gate = _gate(log)
    assert gate.settle(first, log.end, begin=10, wait=log.wait, size=log.size) == first + 5
    assert log.sized == []


def _append(log: ChangeLog, seqs: range, size: int) -> None:
    for i in seqs:
        log.append_nowait(
            Record(Position(1, 1, 100 + i), b"x" * size, ts_us=i, gtid=f"0-1-{i}",
                   tables=(("a.t", 1000),))
        )  # fmt: skip
    log.flush()


def test_payload_counts_record_heads_up_to_the_limit(tmp_path: Path) -> None:
    writer = ChangeLog.open(str(tmp_path / "changes"))
    reader = LocalLog(parse_options({"path": str(tmp_path)}), decoding=False)
    try:
        _append(writer, range(1, 4), 1000)
        _append(writer, range(4, 7), BURST_BYTES)
        size = _payload(reader)
        assert size(1, 4) == 3000 and size(2, 3) == 1000 and size(3, 3) == 0
        assert size(1, 7) == 3000 + BURST_BYTES  # stops at the first head over the limit
    finally:
        reader.close()
        writer.close()


def _latest_after_idle(
    tmp_path: Path, first_size: int, later: int
) -> tuple[int, float, HeadwaterStreamReader]:
    """A stream reader of an idle log (one record, read) whose next look sees one record
    of ``first_size`` bytes; ``later`` more land 20 ms after it. The end of the batch
    ``latestOffset`` cuts and how long it took."""
    writer = ChangeLog.open(str(tmp_path / "changes"))
    _append(writer, range(1, 2), 100)
    stream = HeadwaterStreamReader(parse_options({"path": str(tmp_path)}))
    start = stream.initialOffset()
    end = stream.latestOffset(start, ReadAllAvailable())
    assert end["seq"] == 2
    # idle: nothing new after seq 2 (the gate's "nothing new")
    assert stream.latestOffset(end, ReadAllAvailable()) == end

    def rest() -> None:
        time.sleep(0.02)
        _append(writer, range(3, 3 + later), 1000)

    _append(writer, range(2, 3), first_size)
    landing = threading.Thread(target=rest)
    t0 = time.monotonic()
    landing.start()
    try:
        cut = stream.latestOffset(end, ReadAllAvailable())
        took = time.monotonic() - t0
    finally:
        landing.join()
        writer.close()
    return cut["seq"], took, stream


def test_a_large_first_record_waits_for_the_catch_up_on_a_real_log(tmp_path: Path) -> None:
    seq, took, stream = _latest_after_idle(tmp_path, 60_000, later=5)
    try:
        assert seq == 8  # records 2..7: one batch
        assert took >= 0.05  # (the quiet period after the last landing)
    finally:
        stream.stop()


def test_a_small_first_record_is_cut_alone_on_a_real_log(tmp_path: Path) -> None:
    seq, took, stream = _latest_after_idle(tmp_path, 500, later=5)
    try:
        assert seq == 3  # the commit alone, at once
        assert took < 0.05  # (a wait would end 50 ms after the landing at 20 ms)
    finally:
        stream.stop()


def _steady(every: float, until: float, start: int = 100, step: int = 200) -> _Log:
    """A catch-up landing ``step`` records every ``every`` s until ``until`` s."""
    landings, t, end = [], 0.0, start
    while t <= until + 1e-9:
        landings.append((round(t, 6), end))
        t, end = t + every, end + step
    return _Log(landings, {})


def test_a_catch_up_may_land_for_longer_than_burst_wait() -> None:
    """A restarted reader landing for 0.48 s, a group every 30 ms: a catch-up's burst
    (``behind``) is one batch, cut 50 ms after its last group; a live burst the same
    length is cut at ``burstWaitMs`` (0.2 s)."""
    for is_behind, cut_at in [(True, 0.48 + 0.05), (False, 0.2)]:
        log = _steady(0.03, 0.5)
        gate = BurstGate(0.2, 0.05, clock=lambda log=log: log.now, sleep=lambda s: None,
                         catch_up_s=1.0)  # fmt: skip
        asked: list[int] = []

        def behind(end: int, is_behind: bool = is_behind, asked: list[int] = asked) -> bool:
            asked.append(end)
            return is_behind

        got = gate.settle(100, log.end, begin=1, wait=log.wait, behind=behind)
        assert asked == [100]  # (once, at the first look)
        assert round(log.now - 100.0, 3) == cut_at
        assert got == log.end()
        assert (got == log.landings[-1][1]) is is_behind


def test_a_catch_up_is_still_cut_at_burst_catch_up() -> None:
    log = _steady(0.03, 3.0)
    gate = BurstGate(0.2, 0.05, clock=lambda: log.now, sleep=lambda s: None, catch_up_s=1.0)
    got = gate.settle(100, log.end, begin=1, wait=log.wait, behind=lambda end: True)
    assert round(log.now - 100.0, 3) == 1.0
    assert got == log.end() < log.landings[-1][1]
    # burstCatchUpMs no longer than burstWaitMs: the usual cap
    log = _steady(0.03, 3.0)
    gate = BurstGate(0.2, 0.05, clock=lambda: log.now, sleep=lambda s: None, catch_up_s=0.1)
    gate.settle(100, log.end, begin=1, wait=log.wait, behind=lambda end: True)
    assert round(log.now - 100.0, 3) == 0.2


def test_behind_reads_the_newest_records_commit_time(tmp_path: Path) -> None:
    writer = ChangeLog.open(str(tmp_path / "changes"))
    reader = LocalLog(parse_options({"path": str(tmp_path)}), decoding=False)
    now_us = int(time.time() * 1_000_000)
    try:
        for seq, ts_us in [(1, now_us - 60_000_000), (2, now_us - 10_000_000), (3, now_us)]:
            writer.append_nowait(Record(Position(1, 1, 100 + seq), b"x", ts_us=ts_us,
                                        gtid=f"0-1-{seq}", tables=(("a.t", 1),)))  # fmt: skip
        writer.flush()
        behind = _behind(reader)
        assert behind(2) and behind(3)  # the newest at the first look: 60 s, 10 s old
        assert not behind(4)  # committed now: a live burst
        assert CATCH_UP_LAG_S == 2.0
    finally:
        reader.close()
        writer.close()


def test_burst_catch_up_option() -> None:
    import pytest

    from headwater.errors import ConfigError

    base = {"path": "/x"}
    assert parse_options(base).burst_catch_up_ms == 1000
    assert parse_options({**base, "burstCatchUpMs": "0"}).burst_catch_up_ms == 0
    with pytest.raises(ConfigError) as info:
        parse_options({**base, "burstCatchUpMs": "-5"})
    assert info.value.field == "burstCatchUpMs"
