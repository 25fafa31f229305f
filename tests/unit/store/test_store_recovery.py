"""Recovery and corruption: torn tails, damage anywhere in segments and indexes is detected,
reported with file and offset, and never crashes the store."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from headwater.errors import CorruptRecordError
from headwater.store import AtSeq, ChangeLog, Record, StoreOptions
from headwater.store.record import encode_parts
from headwater.store.segment import BAD, IDX, SEG, segment_name


def build(path: Path, opts: StoreOptions, rec: Callable[..., Record], n: int) -> list[int]:
    with ChangeLog.open(str(path), opts) as log:
        for i in range(1, n + 1):
            log.append_nowait(rec(i))
        log.flush()
        return [m.base for m in log.segments()]


def seqs(path: Path, opts: StoreOptions) -> list[int]:
    with ChangeLog.open(str(path), opts) as log:
        return [r.seq for r in log.reader()]


def frame_ends(rec: Callable[..., Record], n: int) -> list[int]:
    """Byte offset after each of records 1..n in one segment."""
    ends, at = [], 0
    for i in range(1, n + 1):
        at += encode_parts(rec(i), i)[2]
        ends.append(at)
    return ends


def active_path(path: Path, bases: list[int]) -> Path:
    return path / segment_name(bases[-1])


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def test_torn_tail_is_truncated_silently(tmp_path: Path, opts, rec) -> None:
    o = opts(segment_bytes=1 << 20)
    bases = build(tmp_path, o, rec, 30)
    seg = active_path(tmp_path, bases)
    size = seg.stat().st_size
    whole = seg.read_bytes()
    for cut in (1, 11, 12, 40, 80):
        seg.write_bytes(whole + whole[:cut])
        assert seqs(tmp_path, o) == list(range(1, 31))
        assert seg.stat().st_size == size
    with ChangeLog.open(str(tmp_path), o) as log:
        assert log.problems == []
        assert log.append(rec(31)) == 31


def test_truncation_inside_active_segment_keeps_whole_prefix(tmp_path: Path, opts, rec) -> None:
    o = opts(segment_bytes=1 << 20)
    bases = build(tmp_path, o, rec, 30)
    seg = active_path(tmp_path, bases)
    whole = seg.read_bytes()
    ends = frame_ends(rec, 30)
    assert ends[-1] == len(whole)
    for cut in range(len(whole) - 1, 0, -97):
        seg.write_bytes(whole[:cut])
        assert seqs(tmp_path, o) == list(range(1, sum(e <= cut for e in ends) + 1))


def test_damage_in_middle_of_active_segment_is_kept_aside_and_reported(
    tmp_path: Path, opts, rec
) -> None:
    o = opts(segment_bytes=1 << 20)
    bases = build(tmp_path, o, rec, 30)
    seg = active_path(tmp_path, bases)
    ends = frame_ends(rec, 30)
    flip(seg, ends[9] + 20)
    with ChangeLog.open(str(tmp_path), o) as log:
        assert [r.seq for r in log.reader()] == list(range(1, 11))
        (problem,) = log.problems
        assert (problem.path, problem.offset) == (str(seg), ends[9])
        assert "damage" in str(problem)
    assert (tmp_path / (seg.name + BAD)).stat().st_size == ends[-1]


def test_flipped_byte_in_sealed_segment_is_reported_by_reader(tmp_path: Path, opts, rec) -> None:
    bases = build(tmp_path, opts(), rec, 100)
    seg = tmp_path / segment_name(bases[1])
    flip(seg, 100)
    with ChangeLog.open(str(tmp_path), opts()) as log:
        r = log.reader()
        with pytest.raises(CorruptRecordError) as ei:
            while r.next(0) is not None:
                pass
        assert ei.value.path == str(seg)
        assert ei.value.offset is not None and ei.value.offset <= 100
        # The writer sets the damaged sealed segment aside; what remains verifies clean.
        assert [(p.path, p.offset) for p in log.problems] == [(str(seg), ei.value.offset)]
        assert (tmp_path / (seg.name + BAD)).exists() and not seg.exists()
        assert log.verify() == []


@pytest.mark.parametrize("where", ["footer", "trailer", "truncate"])
def test_damaged_footer_sets_sealed_segment_aside(tmp_path: Path, opts, rec, where: str) -> None:
    bases = build(tmp_path, opts(), rec, 100)
    seg = tmp_path / segment_name(bases[1])
    size = seg.stat().st_size
    if where == "footer":
        flip(seg, size - 30)
    elif where == "trailer":
        flip(seg, size - 2)
    else:
        os.truncate(seg, size - 5)
    with ChangeLog.open(str(tmp_path), opts()) as log:
        (problem,) = log.problems
        assert problem.path == str(seg) and problem.offset is not None
        assert (tmp_path / (seg.name + BAD)).exists() and not seg.exists()
        r = log.reader()
        first = [r.next(0).seq for _ in range(1, bases[1])]  # type: ignore[union-attr]
        assert first == list(range(1, bases[1]))
        with pytest.raises(CorruptRecordError, match="missing"):
            r.next(0)


def test_missing_index_is_rebuilt(tmp_path: Path, opts, rec) -> None:
    bases = build(tmp_path, opts(), rec, 100)
    idx = tmp_path / segment_name(bases[2], IDX)
    original = idx.read_bytes()
    idx.unlink()
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.problems == []
        assert idx.read_bytes() == original


@pytest.mark.parametrize("offset", [0, 50, 93, 94, 150, -1, -20, -33])
def test_damaged_index_is_reported_and_rebuilt(tmp_path: Path, opts, rec, offset: int) -> None:
    bases = build(tmp_path, opts(), rec, 100)
    idx = tmp_path / segment_name(bases[2], IDX)
    original = idx.read_bytes()
    flip(idx, offset % len(original))
    with ChangeLog.open(str(tmp_path), opts()) as log:
        (problem,) = log.problems
        assert problem.path == str(idx) and problem.offset is not None
        assert problem.offset <= offset % len(original) or problem.offset == len(original) - 32
        assert idx.read_bytes() == original
        assert [r.seq for r in log.reader()] == list(range(1, 101))


@pytest.mark.parametrize("cut", [1, 10, 32, 94, 200])
def test_truncated_index_is_reported_and_rebuilt(tmp_path: Path, opts, rec, cut: int) -> None:
    bases = build(tmp_path, opts(), rec, 100)
    idx = tmp_path / segment_name(bases[2], IDX)
    original = idx.read_bytes()
    idx.write_bytes(original[:-cut])
    with ChangeLog.open(str(tmp_path), opts()) as log:
        (problem,) = log.problems
        assert problem.path == str(idx) and problem.offset is not None
        assert idx.read_bytes() == original


def test_stale_index_is_rebuilt(tmp_path: Path, opts, rec) -> None:
    bases = build(tmp_path, opts(), rec, 100)
    a, b = (tmp_path / segment_name(bases[k], IDX) for k in (1, 2))
    good = b.read_bytes()
    b.write_bytes(a.read_bytes())
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.problems == []
        assert b.read_bytes() == good


def test_sealed_segment_without_successor_gets_a_new_active_one(tmp_path: Path, opts, rec) -> None:
    bases = build(tmp_path, opts(), rec, 100)
    last = bases[-1]
    (tmp_path / segment_name(last)).unlink()
    (tmp_path / segment_name(last, IDX)).unlink()
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.acked_seq == last - 1
        assert log.append(rec(last)) == last
        assert log.segments()[-1].base == last


def test_leftover_temp_files_are_removed(tmp_path: Path, opts, rec) -> None:
    build(tmp_path, opts(), rec, 10)
    (tmp_path / (segment_name(1, IDX) + ".tmp")).write_bytes(b"junk")
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.problems == []
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path))


def test_garbage_active_segment_recovers_to_empty(tmp_path: Path, opts) -> None:
    (tmp_path / segment_name(1, SEG)).write_bytes(os.urandom(5000))
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.acked_seq == 0
        assert list(log.reader()) == []


def test_reader_sets_a_corrupt_sealed_segment_aside(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        log.append_many([rec(i) for i in range(1, 101)])
        log.flush()
        segs = log.segments()
        victim, after = segs[1], segs[2]
        assert victim.footer is not None
        with open(victim.path, "r+b") as f:
            f.seek(100)  # inside the first record's GTID: its CRC fails
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
        with pytest.raises(CorruptRecordError) as ei:
            list(log.reader(AtSeq(victim.base)))
        assert (ei.value.path, ei.value.offset) == (victim.path, 0)
        assert os.path.exists(victim.path + BAD)
        assert not os.path.exists(victim.path)
        assert not os.path.exists(victim.index_path)
        assert victim.base not in [m.base for m in log.segments()]
        assert [p.path for p in log.problems] == [victim.path]
        assert [r.seq for r in log.reader(AtSeq(after.base))] == list(range(after.base, 101))
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.problems == []
        assert [m.base for m in log.segments()] == [m.base for m in segs if m is not victim]
        reader = log.reader()
        with pytest.raises(CorruptRecordError, match="missing"):
            list(reader)
        assert reader.next_seq == victim.base


def test_reopened_writer_does_not_repeat_the_active_index(tmp_path: Path, opts, rec) -> None:
    """Recovery writes the active segment's index afresh; the reopened writer's appends
    must continue it, not repeat its entries (they did: a read-only process's view of the
    active index then stopped at the repeated first entry, and every lookup past it
    scanned the records from there)."""
    o = opts(segment_bytes=1 << 20)
    build(tmp_path, o, rec, 40)
    with ChangeLog.open(str(tmp_path), o) as log:  # reopened: recovery, then 40 more
        for i in range(41, 81):
            log.append_nowait(rec(i))
        log.flush()
        entries = log.read_side.view(log.segments()[-1]).seqs
        assert len(entries) > 4  # several blocks before and after the reopening
        ro = ChangeLog.open(str(tmp_path), o, read_only=True)
        try:
            meta = ro.read_side.find_segment(80)
            on_disk = ro.read_side.view(meta).seqs
        finally:
            ro.close()
    # Every closed block's entry, in order, once: all but the writer's open last block.
    assert on_disk == entries[:-1]
    assert seqs(tmp_path, o) == list(range(1, 81))
