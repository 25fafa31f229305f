"""Record framing: round trips, and every damaged byte of a frame is detected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headwater.errors import CorruptRecordError
from headwater.position import Position
from headwater.store.record import FRAME, Record, decode_body, encode_parts, frame_crc
from headwater.store.segment import _frame_ok


def frame(rec: Record, seq: int = 9) -> bytes:
    head, payload, n = encode_parts(rec, seq)
    out = head + payload
    assert len(out) == n
    return out


def parse(buf: bytes) -> Record:
    _magic, crc, blen = FRAME.unpack_from(buf, 0)
    body = buf[FRAME.size : FRAME.size + blen]
    assert frame_crc(blen, body) == crc
    return decode_body(body)


def every_flip_refused(path: Path, buf: bytes, read: Any, samples: int) -> None:
    """``read(source, 3, len(buf))`` of the frame at offset 3 of ``buf`` written to
    ``path`` raises CorruptRecordError with a bit flipped in any byte of its header and
    first 80 bytes and in about ``samples`` bytes across the rest (every byte of the small
    frames, a sample of a big one)."""
    from headwater.store.segment import PlainSource

    step = max(1, len(buf) // samples)
    for i in [*range(3, 3 + FRAME.size + 80), *range(3, len(buf), step), len(buf) - 1]:
        bad = bytearray(buf)
        bad[i] ^= 0x10
        path.write_bytes(bad)
        src = PlainSource(str(path))
        try:
            with pytest.raises(CorruptRecordError):
                read(src, 3, len(buf))
        finally:
            src.close()


def test_round_trip_keeps_every_field() -> None:
    rec = Record(
        Position(3, 17, 123456, 2),
        b"\x00events\xff",
        ts_us=1_700_000_000_123_456,
        gtid="0-1-42",
        tables=(("shop.orders", 3), ("shop.ütems", 2**40)),
        schema_version=5,
        flags=1,
        chunk_no=0,
    )
    got = parse(frame(rec, seq=2**63))
    assert got == Record(
        Position(3, 17, 123456, 2),
        b"\x00events\xff",
        1_700_000_000_123_456,
        "0-1-42",
        (("shop.orders", 3), ("shop.ütems", 2**40)),
        5,
        1,
        0,
        2**63,
    )
    assert got.first_chunk and not got.last_chunk


def test_empty_gtid_tables_and_payload() -> None:
    got = parse(frame(Record(Position(0, 0, 0), b"")))
    assert (got.gtid, got.tables, got.payload, got.last_chunk) == ("", (), b"", True)


def test_every_flipped_byte_is_detected() -> None:
    buf = frame(Record(Position(1, 2, 3), b"payload" * 5, gtid="0-1-1", tables=(("a.b", 1),)))
    assert _frame_ok(buf, 0, len(buf)) == len(buf)
    for i in range(len(buf)):
        for bit in (0x01, 0x80):
            bad = bytearray(buf)
            bad[i] ^= bit
            assert _frame_ok(bytes(bad), 0, len(bad)) == 0, i


def test_every_truncation_is_detected() -> None:
    buf = frame(Record(Position(1, 2, 3), b"x" * 40))
    for cut in range(len(buf)):
        assert _frame_ok(buf[:cut], 0, cut) == 0


def test_overlong_gtid_is_refused() -> None:
    with pytest.raises(ValueError, match="GTID longer"):
        encode_parts(Record(Position(1, 1, 1), b"", gtid="x" * 256), 1)


def test_garbage_body_raises_corrupt_record_with_location() -> None:
    with pytest.raises(CorruptRecordError) as ei:
        decode_body(b"\x01\x02", path="seg", offset=77)
    assert (ei.value.path, ei.value.offset) == ("seg", 77)


@pytest.mark.parametrize("size", [0, 40, 300_000])  # the last past PlainSource's window
def test_read_record_reads_the_payload_apart_and_still_checks_every_byte(
    tmp_path: Path, size: int
) -> None:
    """read_record reads the header, then the payload on its own (no copy out of the body),
    the CRC carried over both: the same record as decode_body of the whole body, and a
    flipped bit anywhere in the frame is a CorruptRecordError."""
    from headwater.store.segment import PlainSource, read_record

    rec = Record(Position(1, 2, 3), bytes(range(256)) * (size // 256) + b"p" * (size % 256),
                 gtid="0-1-1", tables=(("a.b", 1), ("c.d", 2)))  # fmt: skip
    buf = b"pad" + frame(rec)
    path = tmp_path / "seg"
    path.write_bytes(buf)
    src = PlainSource(str(path))
    try:
        got, n = read_record(src, 3, len(buf))
    finally:
        src.close()
    assert n == len(buf) - 3 and type(got.payload) is bytes
    assert got == parse(buf[3:])
    assert (got.payload, got.tables, got.gtid) == (rec.payload, rec.tables, rec.gtid)
    every_flip_refused(path, buf, read_record, samples=300)


@pytest.mark.parametrize("size", [0, 40, 300_000])  # the last past PlainSource's window
def test_read_head_is_the_record_without_its_payload_and_checks_every_byte(
    tmp_path: Path, size: int
) -> None:
    """read_head gives what the header says and the payload's size, as RecordHead.of the
    whole record does, and refuses a flipped bit anywhere in the frame (payload included:
    a planning read trusts nothing a whole read refuses)."""
    from headwater.store.record import RecordHead
    from headwater.store.segment import PlainSource, read_head

    rec = Record(Position(4, 5, 6, 7), b"q" * size, ts_us=123, gtid="0-1-9",
                 tables=(("a.b", 3),), schema_version=2, flags=1, chunk_no=0)  # fmt: skip
    buf = b"pad" + frame(rec, seq=11)
    path = tmp_path / "seg"
    path.write_bytes(buf)
    src = PlainSource(str(path))
    try:
        got, n = read_head(src, 3, len(buf))
    finally:
        src.close()
    assert n == len(buf) - 3
    assert got == RecordHead.of(parse(buf[3:]))
    assert (got.seq, got.size, got.tables, got.position) == (11, size, rec.tables, rec.position)
    every_flip_refused(path, buf, read_head, samples=200)
