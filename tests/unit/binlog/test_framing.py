"""Framing: headers, FORMAT_DESCRIPTION, checksums, truncation, on built and real files."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from headwater.binlog.constants import CHECKSUM_ALG_CRC32, CHECKSUM_ALG_OFF, EventType
from headwater.binlog.framing import FormatDescription, iter_buffer_events, iter_file_events
from headwater.errors import BinlogFormatError, ChecksumError, TruncatedError

# Post-header lengths as MariaDB 10.11 writes them (only their count matters here).
POST_HEADERS = bytes(range(1, 41))


def event(type_code: int, body: bytes, *, log_pos: int, crc: bool, flags: int = 0) -> bytes:
    size = 19 + len(body) + (4 if crc else 0)
    data = struct.pack("<IBIIIH", 1700000000, type_code, 1, size, log_pos, flags) + body
    return data + struct.pack("<I", zlib.crc32(data)) if crc else data


def fde(*, crc: bool, version: str = "10.11.19-MariaDB-log") -> bytes:
    body = struct.pack("<H50sIB", 4, version.encode(), 0, 19) + POST_HEADERS
    body += bytes([CHECKSUM_ALG_CRC32 if crc else CHECKSUM_ALG_OFF])
    size = 19 + len(body) + 4
    head = struct.pack("<IBIIIH", 0, EventType.FORMAT_DESCRIPTION, 1, size, 4 + size, 0)
    return head + body + struct.pack("<I", zlib.crc32(head + body) if crc else 0)


def binlog(*bodies: bytes, crc: bool = True) -> bytes:
    out = bytearray(b"\xfebin" + fde(crc=crc))
    for body in bodies:
        out += event(EventType.XID, body, log_pos=len(out) + 19 + len(body) + 4 * crc, crc=crc)
    return bytes(out)


@pytest.mark.parametrize("crc", [True, False])
def test_events_are_framed_with_checksum_stripped(crc: bool) -> None:
    data = binlog(struct.pack("<Q", 7), struct.pack("<Q", 8), crc=crc)
    events = list(iter_buffer_events(data))
    assert [e.type_code for e in events] == [EventType.FORMAT_DESCRIPTION, EventType.XID, 16]
    fd = FormatDescription.parse(events[0].data)
    assert fd.checksum_alg == (CHECKSUM_ALG_CRC32 if crc else CHECKSUM_ALG_OFF)
    assert fd.server_version == "10.11.19-MariaDB-log"
    assert fd.is_mariadb
    assert [bytes(e.body) for e in events[1:]] == [struct.pack("<Q", 7), struct.pack("<Q", 8)]
    assert [e.offset for e in events] == [4, events[0].log_pos, events[1].log_pos]


def test_start_offset_skips_earlier_events_but_reads_the_format_description() -> None:
    data = binlog(struct.pack("<Q", 7), struct.pack("<Q", 8))
    first_xid = 4 + len(fde(crc=True))
    second = first_xid + 19 + 8 + 4
    events = list(iter_buffer_events(data, start=second))
    assert [(e.offset, bytes(e.body)) for e in events] == [(second, struct.pack("<Q", 8))]


def test_flipped_byte_in_an_event_is_a_checksum_error_naming_offset_and_type() -> None:
    data = bytearray(binlog(struct.pack("<Q", 7)))
    offset = 4 + len(fde(crc=True))
    data[offset + 19] ^= 0x40
    with pytest.raises(ChecksumError) as err:
        list(iter_buffer_events(bytes(data), source="x.000001"))
    assert (err.value.source, err.value.offset, err.value.event_type) == ("x.000001", offset, "XID")


def test_input_ending_inside_an_event_is_truncated_error() -> None:
    data = binlog(struct.pack("<Q", 7))
    with pytest.raises(TruncatedError) as err:
        list(iter_buffer_events(data[:-3], source="t"))
    assert err.value.offset == 4 + len(fde(crc=True))
    assert err.value.event_type == "XID"


def test_event_size_smaller_than_header_is_format_error() -> None:
    data = bytearray(binlog(struct.pack("<Q", 7), crc=False))
    offset = 4 + len(fde(crc=False))
    struct.pack_into("<I", data, offset + 9, 5)
    with pytest.raises(BinlogFormatError, match="smaller than the header"):
        list(iter_buffer_events(bytes(data)))


def test_missing_magic_is_rejected() -> None:
    with pytest.raises(BinlogFormatError, match="magic"):
        list(iter_buffer_events(b"GIF89a" + bytes(40)))


def test_first_event_must_be_format_description() -> None:
    data = b"\xfebin" + event(EventType.XID, bytes(8), log_pos=31, crc=False)
    with pytest.raises(BinlogFormatError, match="FORMAT_DESCRIPTION"):
        list(iter_buffer_events(data))


def test_format_description_crc_is_computed_with_in_use_flag_clear() -> None:
    # The server sets LOG_EVENT_BINLOG_IN_USE_F after computing the CRC over the event
    # with the flag clear (sql/log_event.cc, Log_event_footer::event_checksum_test).
    raw = bytearray(fde(crc=True))
    raw[17] |= 0x1
    assert FormatDescription.parse(bytes(raw)).checksum_alg == CHECKSUM_ALG_CRC32
    raw[30] ^= 0x1  # now a real corruption inside the server version
    with pytest.raises(ChecksumError):
        FormatDescription.parse(bytes(raw))


def test_real_mysql_8_file_with_in_use_flag_frames(binlog_fixtures: Path) -> None:
    # json.binlog.000001 was copied while MySQL 8.0.22 had it open (flags 0x1 set).
    events = list(iter_file_events(binlog_fixtures / "mysql" / "json.binlog.000001"))
    fd = FormatDescription.parse(events[0].data)
    assert fd.server_version.startswith("8.0.22")
    assert fd.checksum_alg == CHECKSUM_ALG_CRC32
    offsets = [e.offset for e in events]
    assert offsets == sorted(offsets)
    assert all(e.log_pos == e.offset + len(e.data) + 4 for e in events[1:])


def test_mysql_5_1_file_without_checksums_frames(binlog_fixtures: Path) -> None:
    events = list(iter_file_events(binlog_fixtures / "mysql" / "write-full-row.binlog"))
    fd = FormatDescription.parse(events[0].data)
    assert fd.server_version.startswith("5.1.37")
    assert fd.checksum_alg == CHECKSUM_ALG_OFF
    assert all(e.log_pos == e.offset + len(e.data) for e in events[1:])


def test_empty_file_is_truncated(tmp_path: Path) -> None:
    path = tmp_path / "empty.000001"
    path.write_bytes(b"")
    with pytest.raises(TruncatedError, match="empty file"):
        list(iter_file_events(path))
