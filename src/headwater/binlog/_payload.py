"""TRANSACTION_PAYLOAD (MySQL 8.0.20+, ``binlog_transaction_compression``): a whole
transaction's events, compressed, in one event.

Body (``Transaction_payload::decode``, MySQL ``libs/mysql/binlog/event/codecs/binary.cpp``):
a list of TLV fields, each ``type`` and ``length`` as packed integers then the value::

    1 payload_size        packed integer, bytes of the payload after the list
    2 compression_type    packed integer: 0 ZSTD, 255 NONE
    3 uncompressed_size   packed integer (informational; absent for NONE)
    0                     end of the list (no length)

then ``payload_size`` bytes of payload. Unknown field types are skipped by their length.
The post-header length the FORMAT_DESCRIPTION gives this type is meaningless (MySQL lists
the type code itself there) and the servers ignore it; so do we.

The uncompressed payload is the transaction's events back to back, each a 19-byte common
header and its body, *without* checksums and without the ``\\xfebin`` file magic
(``Payload_event_buffer_istream``): :func:`iter_payload_events` frames them.

Memory is bounded: a payload whose stated or actual uncompressed size exceeds the
context's ``max_uncompressed`` is refused, and decompression stops reading at that size.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass

import zstandard

from headwater.binlog._context import DEFAULT_MAX_UNCOMPRESSED, BinlogEvent, DecodeContext
from headwater.binlog._cursor import Cursor
from headwater.binlog.constants import EVENT_HEADER, EVENT_HEADER_SIZE
from headwater.binlog.framing import RawEvent, event_type_name
from headwater.errors import BinlogFormatError, TruncatedError

__all__ = [
    "COMPRESSION_NONE",
    "COMPRESSION_ZSTD",
    "TransactionPayloadEvent",
    "iter_payload_events",
    "parse_transaction_payload",
]

COMPRESSION_ZSTD = 0
COMPRESSION_NONE = 255
_COMPRESSION_NAMES = {COMPRESSION_ZSTD: "ZSTD", COMPRESSION_NONE: "NONE"}
_unpack_header = EVENT_HEADER.unpack_from


@dataclass(frozen=True, slots=True)
class TransactionPayloadEvent(BinlogEvent):
    """``payload`` as stored (compressed unless ``compression_type``
    is NONE); ``uncompressed_size`` is ``None`` when the event does not state it."""

    payload_size: int
    compression_type: int
    uncompressed_size: int | None
    payload: bytes

    @property
    def compression_name(self) -> str:
        return _COMPRESSION_NAMES.get(self.compression_type, str(self.compression_type))

    def decompress(self, max_size: int = DEFAULT_MAX_UNCOMPRESSED) -> bytes:
        """The uncompressed events, refusing more than ``max_size`` bytes."""
        stated = self.uncompressed_size
        if stated is not None and stated > max_size:
            raise BinlogFormatError(
                f"uncompressed size {stated} exceeds the limit of {max_size} bytes"
            )
        if self.compression_type == COMPRESSION_NONE:
            data = self.payload
        else:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(self.payload))
            try:
                data = reader.read(max_size + 1)
            except zstandard.ZstdError as e:
                raise BinlogFormatError(f"zstd: {e}") from None
        if len(data) > max_size:
            raise BinlogFormatError(f"uncompressed data exceeds the limit of {max_size} bytes")
        if stated is not None and len(data) != stated:
            raise BinlogFormatError(f"uncompressed to {len(data)} bytes, event says {stated}")
        return data


def parse_transaction_payload(raw: RawEvent, ctx: DecodeContext) -> TransactionPayloadEvent:
    cur = Cursor(raw.body)
    payload_size = compression = None
    uncompressed = None
    while True:
        field = cur.packed("field type")
        if field == 0:
            break
        length = cur.packed("field length")
        end = cur.pos + length
        if field == 1:
            payload_size = cur.packed("payload_size")
        elif field == 2:
            compression = cur.packed("compression_type")
        elif field == 3:
            uncompressed = cur.packed("uncompressed_size")
        cur.need(end - cur.pos, f"field {field}")
        cur.pos = end
    if payload_size is None or compression is None:
        raise BinlogFormatError("lacks payload_size or compression_type")
    if compression not in _COMPRESSION_NAMES:
        raise BinlogFormatError(f"unknown compression type {compression}")
    if payload_size != cur.remaining:
        raise TruncatedError(f"payload_size {payload_size}, {cur.remaining} bytes follow")
    return TransactionPayloadEvent(payload_size, compression, uncompressed, cur.rest())


def iter_payload_events(
    outer: RawEvent,
    event: TransactionPayloadEvent,
    *,
    max_size: int = DEFAULT_MAX_UNCOMPRESSED,
    source: str | None = None,
) -> Iterator[RawEvent]:
    """Frame the events inside a TRANSACTION_PAYLOAD.

    Each inner :class:`RawEvent` carries its own header but the *outer* event's ``offset``
    (the inner events have no place in the file of their own).
    """
    try:
        data = memoryview(event.decompress(max_size))
    except BinlogFormatError as e:
        raise e.located(
            source=source, offset=outer.offset, event_type="TRANSACTION_PAYLOAD"
        ) from None
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < EVENT_HEADER_SIZE:
            raise TruncatedError(
                f"{end - pos} bytes at payload offset {pos}, less than an event header",
                source=source,
                offset=outer.offset,
                event_type="TRANSACTION_PAYLOAD",
            )
        ts, type_code, server_id, size, log_pos, flags = _unpack_header(data, pos)
        if size < EVENT_HEADER_SIZE or pos + size > end:
            raise TruncatedError(
                f"inner {event_type_name(type_code)} at payload offset "
                f"{pos} has event_size {size}, {end - pos} bytes left",
                source=source,
                offset=outer.offset,
                event_type="TRANSACTION_PAYLOAD",
            )
        yield RawEvent(
            outer.offset, ts, type_code, server_id, log_pos, flags, data[pos : pos + size]
        )
        pos += size
