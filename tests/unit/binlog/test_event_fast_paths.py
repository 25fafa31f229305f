"""The per-event fast paths (one unpack for XID and MariaDB GTID, in-place ANNOTATE_ROWS)
agree with the field-by-field parse on every layout, and short bodies still fail typed."""

from __future__ import annotations

import struct

import pytest

from headwater.binlog.constants import EventType
from headwater.binlog.events import (
    AnnotateRowsEvent,
    DecodeContext,
    MariadbGtidEvent,
    XidEvent,
    parse_event,
)
from headwater.binlog.framing import RawEvent
from headwater.errors import TruncatedError


def parse(type_code: int, body: bytes) -> object:
    header = struct.pack("<IBIIIH", 1700000000, type_code, 3, 19 + len(body), 2000, 0)
    raw = RawEvent(1000, 1700000000, type_code, 3, 2000, 0, memoryview(header + body))
    return parse_event(raw, DecodeContext(source="built"))


def test_mariadb_gtid_without_flags_extra_byte() -> None:
    # 13 bytes: no room for flags_extra, so the field-by-field path reads it as 0.
    assert parse(EventType.MARIADB_GTID, struct.pack("<QIB", 5, 2, 0x08)) == MariadbGtidEvent(
        5, 2, 3, 0x08
    )


def test_mariadb_gtid_flags_extra_without_fields_takes_the_fast_path() -> None:
    body = struct.pack("<QIBB", 6, 1, 0x0C, 0x02) + bytes(5)  # START_ALTER: no extra fields
    assert parse(EventType.MARIADB_GTID, body) == MariadbGtidEvent(6, 1, 3, 0x0C, flags_extra=2)


def test_mariadb_gtid_multi_engine_and_alter_fields_are_read() -> None:
    body = struct.pack("<QIBBBQ", 7, 1, 0x0C, 0x05, 2, 99)
    event = parse(EventType.MARIADB_GTID, body)
    assert isinstance(event, MariadbGtidEvent)
    assert (event.flags_extra, event.extra_engines, event.sa_seq_no) == (5, 2, 99)


def test_mariadb_gtid_cut_in_the_commit_id_is_truncated() -> None:
    with pytest.raises(TruncatedError, match="commit_id"):
        parse(EventType.MARIADB_GTID, struct.pack("<QIB", 5, 2, 0x02) + bytes(4))


def test_xid_reads_after_the_post_header_and_short_bodies_fail() -> None:
    assert parse(EventType.XID, struct.pack("<Q", 42) + b"extra") == XidEvent(42)
    with pytest.raises(TruncatedError, match="xid"):
        parse(EventType.XID, bytes(7))


def test_annotate_rows_invalid_utf8_is_replaced() -> None:
    event = parse(EventType.ANNOTATE_ROWS, b"INSERT 'caf\xe9'")
    assert event == AnnotateRowsEvent("INSERT 'caf\ufffd'")
