"""Fuzzing framing + parse_event: random bytes, and real files with bytes flipped, cut out or
inserted, give events or typed errors (BinlogFormatError and subclasses), never another
exception and never a hang (each example has a deadline).

Inputs are bounded (files of a few KB) so the whole module stays well under 20 s.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from headwater.binlog.constants import BINLOG_MAGIC, EventType
from headwater.binlog.events import (
    DecodeContext,
    TransactionPayloadEvent,
    iter_events,
    iter_payload_events,
    parse_event,
)
from headwater.binlog.framing import RawEvent
from headwater.errors import BinlogFormatError, TruncatedError

MYSQL = Path("/work/shared/fixtures/binlog/mysql")
SAMPLES = [
    (MYSQL / name).read_bytes()
    for name in (
        "mysql-enum-string-set.000001",  # MySQL 8.0, CRC32, GTIDs, rows
        "transaction_compression.000001",  # zstd payload
        "mariadb-bin.000001",  # MariaDB GTIDs, annotate, v1 rows
        "binlog_savepoint.000001",  # 5.1, no checksums: flips reach the parsers
        "ver_trunk_row_v2.001",  # user var, rand, intvar, load data
    )
]
FUZZ = settings(
    max_examples=400,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)


def drain(data: bytes, *, verify: bool = True) -> int:
    """Decode everything; return the number of events. Only typed errors may escape.
    ``verify=False`` skips CRC checks so that damaged bodies reach the event parsers."""
    count = 0
    try:
        for _raw, _event in iter_events(data, verify=verify):
            count += 1
    except BinlogFormatError as e:
        assert e.offset is not None
        assert e.source == "<buffer>"
    return count


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes_after_the_magic(data: bytes) -> None:
    drain(BINLOG_MAGIC + data)


@FUZZ
@given(st.sampled_from(range(len(SAMPLES))), st.data())
def test_flipped_bytes(index: int, data: st.DataObject) -> None:
    buf = bytearray(SAMPLES[index][:4000])
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(4, len(buf) - 1))
        buf[pos] ^= data.draw(st.integers(1, 255))
    drain(bytes(buf), verify=data.draw(st.booleans()))


@FUZZ
@given(st.sampled_from(range(len(SAMPLES))), st.data())
def test_truncations_and_insertions(index: int, data: st.DataObject) -> None:
    buf = SAMPLES[index][:4000]
    cut = data.draw(st.integers(4, len(buf)))
    if data.draw(st.booleans()):
        buf = buf[:cut]
    else:
        buf = buf[:cut] + data.draw(st.binary(min_size=1, max_size=64)) + buf[cut:]
    drain(buf)


# Bodies of every parsed type code go straight to parse_event, with no checksum in the way.
_TYPES = sorted({int(t) for t in EventType} - {EventType.FORMAT_DESCRIPTION} | {200, 255})


@FUZZ
@given(st.sampled_from(_TYPES), st.binary(max_size=512), st.integers(0, 2**32 - 1))
def test_parse_event_on_random_bodies(type_code: int, body: bytes, log_pos: int) -> None:
    header = struct.pack("<IBIIIH", 1, type_code, 1, 19 + len(body), log_pos, 0)
    raw = RawEvent(100, 1, type_code, 1, log_pos, 0, memoryview(header + body))
    ctx = DecodeContext(source="fuzz", max_uncompressed=1 << 20)
    try:
        parse_event(raw, ctx)
    except BinlogFormatError as e:
        assert (e.source, e.offset) == ("fuzz", 100)


def test_flipped_crc32_file_is_a_checksum_error_not_a_crash() -> None:
    buf = bytearray(SAMPLES[0])
    buf[300] ^= 0xFF
    assert drain(bytes(buf)) < drain(SAMPLES[0])


def test_zstd_payload_with_valid_frame_but_garbage_inside() -> None:
    """A TRANSACTION_PAYLOAD whose zstd frame is fine but decompresses to junk events."""
    junk = bytes(range(256)) * 4
    payload = zstandard.ZstdCompressor().compress(junk)
    tlv = bytes([2, 1, 0, 3, 3, 0xFC]) + struct.pack("<H", len(junk))
    tlv += bytes([1, 3, 0xFC]) + struct.pack("<H", len(payload)) + b"\x00"
    body = tlv + payload
    header = struct.pack("<IBIIIH", 1, EventType.TRANSACTION_PAYLOAD, 1, 19 + len(body), 0, 0)
    raw = RawEvent(4, 1, EventType.TRANSACTION_PAYLOAD, 1, 0, 0, memoryview(header + body))
    event = parse_event(raw, DecodeContext())
    assert isinstance(event, TransactionPayloadEvent)
    with pytest.raises(TruncatedError, match="inner ROTATE at payload offset 0"):
        list(iter_payload_events(raw, event, source="junk"))
