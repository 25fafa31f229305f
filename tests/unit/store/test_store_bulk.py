"""append_frames (the reader's compiled fast path) against append_many: the same bytes on
disk, the same index, the same records through the memory tail and through the files."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from headwater._native import crc32c as native_crc32c
from headwater.errors import CorruptRecordError
from headwater.store import AtSeq, ChangeLog, Record, StoreOptions
from headwater.store.record import PREFIX, encode_parts
from headwater.store.segment import SEG, parse_name, read_footer


def unstamped(records: list[Record]) -> tuple[bytearray, list[str]]:
    """Frames as the scanner builds them: seq 0, CRC 0."""
    out = bytearray()
    for r in records:
        head, payload, _n = encode_parts(r, 0)
        out += PREFIX.pack(int.from_bytes(head[:4], "little"), 0) + head[PREFIX.size :] + payload
    return out, [r.gtid for r in records]


def files(directory: Path) -> dict[str, object]:
    """Each segment's records and footer (but its sealing time), each index file's bytes."""
    out: dict[str, object] = {}
    for name in sorted(os.listdir(directory)):
        parsed = parse_name(name)
        if parsed is None:
            continue
        data = (directory / name).read_bytes()
        if parsed[1] == SEG:
            try:
                footer = read_footer(str(directory / name))
            except CorruptRecordError:  # the active segment: no footer yet
                out[name] = data
                continue
            out[name] = (data[: footer.data_end], replace(footer, sealed_at_us=0))
        else:
            out[name] = data
    return out


def mariadb_gtid(i: int) -> str:
    """Mostly one domain and server (the index summarizes such blocks natively), now and
    then another server or domain (summarized from the strings), and one non-canonical."""
    if i % 97 == 0:
        return f"{i % 3}-1-{i}"
    if i % 41 == 0:
        return f"0-{i}-{i}"
    return "0-01-5" if i == 250 else f"0-1-{1000 + i}"


@pytest.mark.parametrize("strings", [True, False], ids=["gtid-strings", "gtids-from-frames"])
@pytest.mark.parametrize("style", ["mysql", "mariadb"])
@pytest.mark.parametrize("batch", [1, 7, 50])
def test_append_frames_writes_the_bytes_append_many_writes(
    tmp_path: Path,
    opts: Callable[..., StoreOptions],
    rec: Callable[..., Record],
    batch: int,
    style: str,
    strings: bool,
) -> None:
    records = [
        rec(i, size=30 + i % 90, gtid=mariadb_gtid(i) if style == "mariadb" else None)
        for i in range(1, 301)
    ]
    a, b = tmp_path / "many", tmp_path / "frames"
    with ChangeLog.open(str(a), opts()) as log:
        for i in range(0, len(records), batch):
            log.append_many(records[i : i + batch])
    with ChangeLog.open(str(b), opts()) as log:
        for i in range(0, len(records), batch):
            frames, gtids = unstamped(records[i : i + batch])
            last = log.append_frames(memoryview(frames), gtids if strings else None)
            assert last == min(i + batch, len(records))
    assert len(files(a)) > 3  # segments rolled in both
    assert files(a) == files(b)
    with ChangeLog.open(str(b), opts()) as log:
        got = list(log.reader())
        assert [r.seq for r in got] == list(range(1, 301))
        assert [(r.position, r.payload, r.tables, r.gtid) for r in got] == [
            (r.position, r.payload, r.tables, r.gtid) for r in records
        ]
        assert log.latest() is not None and log.latest().seq == 300  # type: ignore[union-attr]


def test_the_memory_tail_decodes_frames_on_demand(
    tmp_path: Path, opts: Callable[..., StoreOptions], rec: Callable[..., Record]
) -> None:
    records = [rec(i) for i in range(1, 21)]
    with ChangeLog.open(
        str(tmp_path), opts(segment_bytes=1 << 20, memory_tail_bytes=1 << 20)
    ) as log:
        frames, gtids = unstamped(records)
        assert log.append_frames(memoryview(frames), gtids) == 20
        log.flush()
        hit = log.read_side.tail_get(7)
        assert hit is not None
        assert hit[0].seq == 7 and hit[0].payload == records[6].payload
        with log.reader(AtSeq(5)) as r:
            got = [r.next(0) for _ in range(16)]
    assert [g.seq for g in got if g is not None] == list(range(5, 21))
    assert [g.gtid for g in got if g is not None] == [r.gtid for r in records[4:]]


def test_frames_inside_a_chunk_group_are_refused(
    tmp_path: Path, opts: Callable[..., StoreOptions], rec: Callable[..., Record]
) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        log.append_nowait(rec(1, flags=1))
        frames, gtids = unstamped([rec(2)])
        with pytest.raises(ValueError, match="chunk group"):
            log.append_frames(memoryview(frames), gtids)
        log.append_nowait(rec(3, flags=2, chunk_no=1))


def test_native_crc32c_is_the_crc32c_package() -> None:
    from crc32c import crc32c

    for data in (b"", b"x", bytes(range(256)) * 9, b"headwater" * 1001):
        assert native_crc32c(data) == crc32c(data)
        assert native_crc32c(data, 0xDEADBEEF) == crc32c(data, 0xDEADBEEF)
