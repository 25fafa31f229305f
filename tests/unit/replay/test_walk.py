"""The C event walk of a replay's key pass (_native/walk.c) against scanning each rows
event directly (lastwrite.c), and on bad input: it stops (SLOW) instead of guessing, so
the Python walk raises its typed error; a row image past its event's end raises the
scanner's ValueError; nothing crashes on truncated or flipped bytes.

Payloads are built as the store keeps them (headwater/changes/__init__.py encode_events:
a 4-byte length, then the 19-byte event header and body) with v2 rows events laid out as
MySQL's libbinlogevents rows_event.h writes them: table id (6 bytes), flags (2), extra
data length (2, counting itself), column count (packed), the columns-present bitmap(s),
then the row images (tests/unit/replay/test_keyscan.py builds those).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st
from tests.unit.replay.test_keyscan import SHAPE, generate, image, op_strategy, scan

from headwater._native._lastwrite import DELETE, INSERT, UPDATE, Scanner
from headwater._native._walk import DONE, FIELDS, SLOW, TABLE_MAP, walk

TABLE_ID = 5
#: v2 rows event type codes (binlog/constants.py EventType WRITE_ROWS, ...)
CODES = {INSERT: 30, UPDATE: 31, DELETE: 32}


def event(code: int, body: bytes) -> bytes:
    size = 19 + len(body)
    header = struct.pack("<IBIIIH", 0, code, 1, size, 0, 0)
    return struct.pack("<I", size) + header + body


def rows_event(
    op: int, rows: bytes, *, table_id: int = TABLE_ID, width: int = 2, bitmap: int = 0b11
) -> bytes:
    head = table_id.to_bytes(6, "little") + b"\x00\x00" + b"\x02\x00" + bytes([width])
    bitmaps = bytes([bitmap]) * (2 if op == UPDATE else 1)
    return event(CODES[op], head + bitmaps + rows)


TABLE_MAP_EVENT = event(19, TABLE_ID.to_bytes(6, "little") + b"\x00" * 8)
ENTRY = {TABLE_ID: (0, SHAPE, 2)}


def run(payload: bytes, tables: dict, scanner: Scanner, expected: int = -1) -> tuple:
    out = bytearray()
    status, pos, ordinal = walk(payload, 0, 6, tables, scanner, 0, out, expected)
    return status, pos, ordinal, [out[i : i + 8 * FIELDS] for i in range(0, len(out), 8 * FIELDS)]


@settings(max_examples=150, deadline=None)
@given(st.lists(op_strategy, max_size=60), st.integers(1, 3))
def test_the_walk_scans_as_each_event_scanned_directly(ops: list, parts: int) -> None:
    events, state = generate(ops)
    payload = b"".join(rows_event(op, rows) for op, rows in events)
    for part in range(parts):
        scanner = Scanner(parts, part)
        status, pos, ordinal, rows = run(payload, ENTRY, scanner)
        assert (status, pos, ordinal) == (DONE, len(payload), len(events))
        direct = Scanner(parts, part)
        at = 0
        for i, (op, buf) in enumerate(events):
            direct.scan(op, SHAPE, SHAPE if op == UPDATE else None, buf, 0, len(buf), i)
            index, op_, body, first, end, _count = struct.unpack("<6q", rows[i])
            assert (index, op_) == (0, op)
            assert (body, first, end) == (
                at + 4 + 19,
                at + 4 + 19 + 12 + (op == UPDATE),
                at + 4 + 19 + 12 + (op == UPDATE) + len(buf),
            )
            assert payload[first:end] == buf
            at = end
        # the survivors' offsets are the payload's, the sequences the same
        got_seqs, got_offsets = scanner.survivors()
        want_seqs, want_offsets = direct.survivors()
        assert got_seqs == want_seqs
        starts = [struct.unpack("<6q", r)[3] for r in rows]
        n = len(want_seqs) // 8
        offsets = struct.unpack(f"<{n}q", got_offsets)
        seqs = struct.unpack(f"<{n}q", got_seqs)
        base = struct.unpack(f"<{n}q", want_offsets)
        assert [o - starts[s >> 32] for o, s in zip(offsets, seqs, strict=True)] == list(base)
    assert scan(events, 1, 0) == state


def test_a_table_map_stops_the_walk_at_its_length_prefix() -> None:
    payload = (
        rows_event(INSERT, image(1, "a")) + TABLE_MAP_EVENT + rows_event(INSERT, image(2, "b"))
    )
    scanner = Scanner(1, 0)
    out = bytearray()
    status, pos, ordinal = walk(payload, 0, 6, ENTRY, scanner, 7, out, 2)
    assert (status, ordinal) == (TABLE_MAP, 8)
    assert payload[pos:].startswith(TABLE_MAP_EVENT)
    status, pos, ordinal = walk(payload, pos + len(TABLE_MAP_EVENT), 6, ENTRY, scanner, 8, out, 2)
    assert (status, pos, ordinal) == (DONE, len(payload), 9)
    assert scanner.keys == 2 and len(out) == 2 * 8 * FIELDS


def test_other_tables_and_other_events_are_skipped() -> None:
    payload = (
        rows_event(INSERT, image(1, "a"), table_id=9)
        + event(2, b"BEGIN")  # a QUERY event
        + event(169, (9).to_bytes(6, "little") + b"\x00" * 8)  # compressed, other table
        + rows_event(DELETE, image(3, None))
    )
    scanner = Scanner(1, 0)
    status, pos, ordinal, rows = run(payload, {**ENTRY, 9: None}, scanner)
    assert (status, pos, ordinal, len(rows)) == (DONE, len(payload), 1, 1)
    assert struct.unpack("<6q", rows[0])[:2] == (0, DELETE)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(rows_event(INSERT, image(1, "a"), table_id=8), id="unmapped table id"),
        pytest.param(rows_event(INSERT, image(1, "a"), bitmap=0b01), id="partial image"),
        pytest.param(rows_event(INSERT, image(1, "a"), width=3), id="column count"),
        pytest.param(event(39, TABLE_ID.to_bytes(6, "little") + b"\x00" * 8), id="json diff"),
        pytest.param(event(169, TABLE_ID.to_bytes(6, "little") + b"\x00" * 8), id="compressed"),
        pytest.param(rows_event(INSERT, image(1, "a"))[:-3], id="event past the payload"),
        pytest.param(struct.pack("<I", 5) + b"\x00" * 5, id="event shorter than a header"),
        pytest.param(b"\x01\x00", id="payload ends inside a length"),
        pytest.param(event(30, TABLE_ID.to_bytes(6, "little") + b"\x00\x00\x09\x00"), id="extra"),
        pytest.param(event(30, TABLE_ID.to_bytes(6, "little")), id="header past the end"),
    ],
)
def test_what_the_walk_does_not_take_stops_it_untouched(payload: bytes) -> None:
    scanner = Scanner(1, 0)
    lead = rows_event(INSERT, image(1, "a"))
    status, pos, ordinal, rows = run(lead + payload, ENTRY, scanner)
    assert (status, pos, ordinal, len(rows)) == (SLOW, len(lead), 1, 1)


def test_a_full_image_of_another_width_than_the_schema_version_says_stops() -> None:
    status, pos, _o, rows = run(rows_event(INSERT, image(1, "a")), ENTRY, Scanner(1, 0), 3)
    assert (status, pos, rows) == (SLOW, 0, [])


def test_a_row_image_past_its_event_end_raises_and_applies_nothing() -> None:
    rows = image(1, "abc")[:-1]
    scanner = Scanner(1, 0)
    with pytest.raises(ValueError, match="past the end"):
        run(rows_event(INSERT, image(2, "x")) + rows_event(INSERT, rows), ENTRY, scanner)
    assert scanner.keys == 1


def test_bad_arguments_are_refused() -> None:
    scanner = Scanner(1, 0)
    with pytest.raises(ValueError):
        walk(b"", 1, 6, {}, scanner, 0, bytearray(), -1)
    with pytest.raises(ValueError):
        walk(b"", 0, 5, {}, scanner, 0, bytearray(), -1)
    with pytest.raises(TypeError):
        walk(rows_event(INSERT, image(1, "a")), 0, 6, {TABLE_ID: (0, "no shape", 2)}, scanner, 0,
             bytearray(), -1)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(op_strategy, min_size=1, max_size=30), st.data())
def test_truncated_or_flipped_payloads_stop_or_raise_never_crash(
    ops: list, data: st.DataObject
) -> None:
    events, _state = generate(ops)
    payload = bytearray(b"".join(rows_event(op, rows) for op, rows in events) or TABLE_MAP_EVENT)
    cut = data.draw(st.integers(0, len(payload)))
    del payload[cut:]
    for _ in range(data.draw(st.integers(0, 3))):
        if payload:
            at = data.draw(st.integers(0, len(payload) - 1))
            payload[at] ^= data.draw(st.integers(1, 255))
    scanner = Scanner(1, 0)
    try:
        status, pos, _ordinal, _rows = run(bytes(payload), ENTRY, scanner)
    except ValueError as exc:
        assert "past the end" in str(exc) or "rows" in str(exc) or "key" in str(exc)
    else:
        assert status in (DONE, TABLE_MAP, SLOW) and 0 <= pos <= len(payload)


def test_an_entry_with_its_own_scanner_feeds_that_scanner() -> None:
    """The net-effect apply's walk: one scanner per table (a four-item entry)."""
    payload = (
        rows_event(INSERT, image(1, "a"))
        + rows_event(INSERT, image(2, "b"), table_id=9)
        + rows_event(DELETE, image(1, None))
    )
    first, second = Scanner(1, 0), Scanner(1, 0)
    tables = {TABLE_ID: (0, SHAPE, 2, first), 9: (1, SHAPE, 2, second)}
    status, pos, ordinal, rows = run(payload, tables, None)  # type: ignore[arg-type]
    assert (status, pos, ordinal) == (DONE, len(payload), 3)
    assert [struct.unpack("<6q", r)[:2] for r in rows] == [(0, INSERT), (1, INSERT), (0, DELETE)]
    assert (first.keys, second.keys) == (1, 1)
    # key 1 ends removed (ordinal 2) in the first; key 2 put at ordinal 1 in the second
    assert first.survivors()[0] == b""
    assert struct.unpack("<q", second.survivors()[0]) == (1 << 32,)


def test_stop_query_stops_at_query_events_only_when_asked() -> None:
    lead = rows_event(INSERT, image(1, "a"))
    for code in (2, 165):  # QUERY_EVENT, MariaDB's QUERY_COMPRESSED_EVENT
        payload = lead + event(code, b"BEGIN") + rows_event(INSERT, image(2, "b"))
        out = bytearray()
        assert walk(payload, 0, 6, ENTRY, Scanner(1, 0), 0, out, -1) == (DONE, len(payload), 2)
        got = walk(payload, 0, 6, ENTRY, Scanner(1, 0), 0, bytearray(), -1, True)
        assert got == (SLOW, len(lead), 1)
