"""Control and small statement-context events: their bodies and parsers.

Layouts follow MySQL ``libs/mysql/binlog/event/control_events.cpp`` and
``statement_events.cpp`` (the event constructors that read a buffer) and, for the
MariaDB-only types, MariaDB ``sql/log_event.cc``. Every parser skips the event type's
post-header length as the FORMAT_DESCRIPTION gives it before the fields it reads, as the
servers do; all integers are little-endian::

    ROTATE              position u64 (post-header, 8 bytes), next file name (rest of body)
    STOP                empty
    XID                 xid u64
    INTVAR              type u8 (1 LAST_INSERT_ID, 2 INSERT_ID), value u64
    RAND                seed1 u64, seed2 u64
    USER_VAR            name_len u32, name, is_null u8; unless null: type u8, charset u32,
                        value_len u32, value, [flags u8 (1 = UNSIGNED), absent before 5.6]
    INCIDENT            incident u16, message_len u8, message
    HEARTBEAT           the current log file name (rest); its position is the header log_pos
    HEARTBEAT_V2        TLV fields (type packed, length packed, value): 1 file name,
                        2 position (packed); type 0 ends the list (codecs/binary.cpp)
    ROWS_QUERY          length u8 (ignored: it overflows for statements > 255 bytes), query
    ANNOTATE_ROWS       the statement text (whole body; MariaDB)
    BINLOG_CHECKPOINT   file_len u32, file name (MariaDB)
    XA_PREPARE          one_phase u8, format_id u32, gtrid_len u32, bqual_len u32, data
                        (both lengths at most 64)

A fake ROTATE -- the one a server sends first when a replica connects -- is marked by a zero
``log_pos`` in the header, a zero timestamp, or ``LOG_EVENT_ARTIFICIAL_F`` in the flags;
:attr:`RotateEvent.is_artificial` says so.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from headwater.binlog._context import BinlogEvent, DecodeContext
from headwater.binlog._cursor import Cursor
from headwater.binlog._frozen import maker
from headwater.binlog.charsets import codec_for_collation
from headwater.binlog.codec import decimal_size, row_decoder_for
from headwater.binlog.constants import LOG_EVENT_ARTIFICIAL_F, ColumnType, EventType
from headwater.binlog.framing import FormatDescription, RawEvent
from headwater.binlog.tablemap import TableMap
from headwater.errors import BinlogFormatError, TruncatedError

__all__ = [
    "AnnotateRowsEvent",
    "BinlogCheckpointEvent",
    "FormatDescriptionEvent",
    "HeartbeatEvent",
    "IncidentEvent",
    "IntvarEvent",
    "RandEvent",
    "RotateEvent",
    "RowsQueryEvent",
    "StopEvent",
    "UnknownEvent",
    "UserVarEvent",
    "XaPrepareEvent",
    "XidEvent",
    "charset_text",
]

_FN_REFLEN = 512  # MySQL caps file names in ROTATE/HEARTBEAT at FN_REFLEN - 1 bytes

_BINARY = 63


def charset_text(raw: bytes, collation: int | None) -> str:
    """Statement or variable text in the given collation's character set.

    Unknown collations and the binary charset decode as UTF-8; undecodable bytes are
    replaced (this text is for reading; the events keep the bytes where it matters).
    """
    codec = codec_for_collation(collation) if collation is not None else None
    try:
        return raw.decode(codec or "utf-8", "replace")
    except LookupError:
        return raw.decode("utf-8", "replace")


def _skip_post_header(raw: RawEvent, ctx: DecodeContext) -> Cursor:
    cur = Cursor(raw.body)
    cur.skip(ctx.post_header_length(raw.type_code), "post-header")
    return cur


@dataclass(frozen=True, slots=True)
class FormatDescriptionEvent(BinlogEvent):
    """FORMAT_DESCRIPTION: what the events after it look like (see ``framing``)."""

    fde: FormatDescription


def parse_format_description(raw: RawEvent, ctx: DecodeContext) -> FormatDescriptionEvent:
    fde = FormatDescription.parse(raw.data, source=ctx.source, offset=raw.offset)
    if ctx.fde != fde:
        ctx.table_map_cache.clear()  # parsing depends on the table id size and flavour
    ctx.fde = fde
    return FormatDescriptionEvent(fde)


@dataclass(frozen=True, slots=True)
class RotateEvent(BinlogEvent):
    """the stream continues in ``next_file`` at ``position``."""

    position: int
    next_file: str
    is_artificial: bool


def parse_rotate(raw: RawEvent, ctx: DecodeContext) -> RotateEvent:
    cur = Cursor(raw.body)
    post = ctx.post_header_length(EventType.ROTATE)
    position = 4
    if post:
        position = cur.u64("position")
        cur.skip(post - 8, "post-header")
    name = cur.rest()
    if not name:
        raise BinlogFormatError("no file name")
    artificial = raw.log_pos == 0 or raw.timestamp == 0 or bool(raw.flags & LOG_EVENT_ARTIFICIAL_F)
    return RotateEvent(position, name[: _FN_REFLEN - 1].decode("utf-8", "replace"), artificial)


@dataclass(frozen=True, slots=True)
class StopEvent(BinlogEvent):
    """STOP: the server shut down; the log ends here."""


def parse_stop(raw: RawEvent, ctx: DecodeContext) -> StopEvent:
    return StopEvent()


@dataclass(frozen=True, slots=True)
class XidEvent(BinlogEvent):
    """XID: commit of a transaction of a transactional engine; ``xid`` is its id."""

    xid: int


_XID = struct.Struct("<Q").unpack_from
#: XidEvent(...) at the cost of a plain class: one per transaction (see _frozen).
_make_xid = maker(XidEvent)


def parse_xid(raw: RawEvent, ctx: DecodeContext) -> XidEvent:
    # One per transaction: read in place when the body is long enough, else the Cursor
    # path raises the TruncatedError.
    body = raw.body
    start = ctx.post_header_length(raw.type_code)
    if len(body) >= start + 8:
        return _make_xid(_XID(body, start)[0])
    return XidEvent(_skip_post_header(raw, ctx).u64("xid"))


@dataclass(frozen=True, slots=True)
class IntvarEvent(BinlogEvent):
    """INTVAR: ``LAST_INSERT_ID()`` (type 1) or the next auto-increment value (type 2)."""

    type: int
    value: int

    @property
    def type_name(self) -> str:
        return {1: "LAST_INSERT_ID", 2: "INSERT_ID"}.get(self.type, f"INTVAR_{self.type}")


def parse_intvar(raw: RawEvent, ctx: DecodeContext) -> IntvarEvent:
    cur = _skip_post_header(raw, ctx)
    return IntvarEvent(cur.u8("type"), cur.u64("value"))


@dataclass(frozen=True, slots=True)
class RandEvent(BinlogEvent):
    """RAND: the seeds of ``RAND()`` for the next statement."""

    seed1: int
    seed2: int


def parse_rand(raw: RawEvent, ctx: DecodeContext) -> RandEvent:
    cur = _skip_post_header(raw, ctx)
    return RandEvent(cur.u64("seed1"), cur.u64("seed2"))


# Item_result values (include/udf_registration_types.h)
_STRING_RESULT, _REAL_RESULT, _INT_RESULT, _ROW_RESULT, _DECIMAL_RESULT = 0, 1, 2, 3, 4
_UNSIGNED_F = 1


@dataclass(frozen=True, slots=True)
class UserVarEvent(BinlogEvent):
    """``SET @name = value`` as the next statement needs it.

    ``type`` is MySQL's Item_result (0 string, 1 real, 2 int, 4 decimal); ``value`` is
    ``None`` for NULL, ``str`` (``bytes`` for the binary charset), ``float``, ``int``
    (signed unless ``flags`` has UNSIGNED) or ``Decimal``; ``raw_value`` keeps the bytes.
    ``flags`` is ``None`` when the server did not write it (< 5.6).
    """

    name: str
    is_null: bool
    type: int
    charset: int
    value: Any
    raw_value: bytes
    flags: int | None


def parse_user_var(raw: RawEvent, ctx: DecodeContext) -> UserVarEvent:
    cur = _skip_post_header(raw, ctx)
    name_len = cur.u32("name_len")
    if name_len == 0:
        raise BinlogFormatError("empty variable name")
    name = cur.string(name_len, "name")
    if cur.u8("is_null"):
        return UserVarEvent(name, True, _STRING_RESULT, _BINARY, None, b"", None)
    vtype = cur.u8("type")
    if vtype not in (_STRING_RESULT, _REAL_RESULT, _INT_RESULT, _DECIMAL_RESULT):
        raise BinlogFormatError(f"unknown value type {vtype}")
    charset = cur.u32("charset")
    data = cur.take(cur.u32("value_len"), "value")
    flags = cur.u8("flags") if cur.remaining else None
    return UserVarEvent(
        name, False, vtype, charset, _user_value(vtype, charset, data, flags), data, flags
    )


def _user_value(vtype: int, charset: int, data: bytes, flags: int | None) -> Any:
    if vtype == _STRING_RESULT:
        return data if charset == _BINARY else charset_text(data, charset)
    if vtype == _REAL_RESULT:
        if len(data) < 8:
            raise BinlogFormatError(f"real value of {len(data)} bytes")
        return struct.unpack_from("<d", data)[0]
    if vtype == _INT_RESULT:
        if len(data) < 8:
            raise BinlogFormatError(f"int value of {len(data)} bytes")
        unsigned = flags is not None and bool(flags & _UNSIGNED_F)
        return int.from_bytes(data[:8], "little", signed=not unsigned)
    return _user_decimal(data)


def _user_decimal(data: bytes) -> Decimal:
    """precision u8, scale u8, then MySQL's binary decimal (``decimal2bin``), checked as
    ``is_user_var_decimal_metadata_valid`` does (statement_events.cpp) and decoded by the
    row codec as a NEWDECIMAL(precision, scale) column."""
    if len(data) < 2:
        raise BinlogFormatError(f"decimal value of {len(data)} bytes")
    precision, scale = data[0], data[1]
    if not 0 < precision <= 65 or scale > 30 or scale > precision:
        raise BinlogFormatError(f"invalid decimal precision/scale {precision}/{scale}")
    if decimal_size(precision, scale) > len(data) - 2:
        raise TruncatedError(f"decimal({precision},{scale}) value of {len(data) - 2} bytes")
    column = TableMap(0, 0, "", "", (ColumnType.NEWDECIMAL,), (precision << 8 | scale,), (False,))
    values, _end = row_decoder_for(column).decode_image(b"\0" + data[2:], 0)
    value = values[0]
    if not isinstance(value, Decimal):
        raise BinlogFormatError(f"decimal value decoded as {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True)
class IncidentEvent(BinlogEvent):
    """something happened on the source that replicas cannot replay (1 = lost
    events); ``message`` says what."""

    incident: int
    message: str


def parse_incident(raw: RawEvent, ctx: DecodeContext) -> IncidentEvent:
    cur = Cursor(raw.body)
    incident = cur.u16("incident")
    cur.pos = max(cur.pos, ctx.post_header_length(EventType.INCIDENT))
    message = cur.string(cur.u8("message_len"), "message") if cur.remaining else ""
    return IncidentEvent(incident, message)


@dataclass(frozen=True, slots=True)
class HeartbeatEvent(BinlogEvent):
    """HEARTBEAT (v1 and v2): the source is alive and at ``log_file``:``position``."""

    log_file: str
    position: int


def parse_heartbeat(raw: RawEvent, ctx: DecodeContext) -> HeartbeatEvent:
    name = bytes(raw.body)
    if not name:
        raise BinlogFormatError("no file name")
    return HeartbeatEvent(name[: _FN_REFLEN - 1].decode("utf-8", "replace"), raw.log_pos)


def parse_heartbeat_v2(raw: RawEvent, ctx: DecodeContext) -> HeartbeatEvent:
    cur = Cursor(raw.body)
    name, position = "", 0
    while cur.remaining:
        field = cur.packed("field type")
        if field == 0:
            break
        length = cur.packed("field length")
        if field == 1:
            name = cur.string(length, "log file name")
        elif field == 2:
            position = cur.packed("log position")
        else:
            cur.skip(length, f"field {field}")
    return HeartbeatEvent(name, position)


@dataclass(frozen=True, slots=True)
class RowsQueryEvent(BinlogEvent):
    """ROWS_QUERY (MySQL, ``binlog_rows_query_log_events``): the statement of the rows
    events after it."""

    query: str


def parse_rows_query(raw: RawEvent, ctx: DecodeContext) -> RowsQueryEvent:
    cur = _skip_post_header(raw, ctx)
    cur.skip(1, "length")  # one byte, truncated for long statements: the rest is the text
    return RowsQueryEvent(cur.rest().decode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class AnnotateRowsEvent(BinlogEvent):
    """ANNOTATE_ROWS (MariaDB, ``binlog_annotate_row_events``): the statement of the rows
    events after it."""

    query: str


_make_annotate_rows = maker(AnnotateRowsEvent)


def parse_annotate_rows(raw: RawEvent, ctx: DecodeContext) -> AnnotateRowsEvent:
    body = raw.body
    start = ctx.post_header_length(raw.type_code)
    if start <= len(body):  # one per statement: decoded in place, no Cursor
        return _make_annotate_rows(str(body[start:], "utf-8", "replace"))
    cur = _skip_post_header(raw, ctx)
    return AnnotateRowsEvent(cur.rest().decode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class BinlogCheckpointEvent(BinlogEvent):
    """BINLOG_CHECKPOINT (MariaDB): crash recovery needs binlog files from ``log_file`` on."""

    log_file: str


def parse_binlog_checkpoint(raw: RawEvent, ctx: DecodeContext) -> BinlogCheckpointEvent:
    cur = Cursor(raw.body)
    length = cur.u32("file_len")
    cur.pos = max(cur.pos, ctx.post_header_length(EventType.BINLOG_CHECKPOINT))
    return BinlogCheckpointEvent(cur.string(length, "file name"))


@dataclass(frozen=True, slots=True)
class XaPrepareEvent(BinlogEvent):
    """``XA PREPARE`` (or ``XA COMMIT ... ONE PHASE``) of the XA transaction
    ``format_id``/``gtrid``/``bqual``."""

    one_phase: bool
    format_id: int
    gtrid: bytes
    bqual: bytes


def parse_xa_prepare(raw: RawEvent, ctx: DecodeContext) -> XaPrepareEvent:
    cur = _skip_post_header(raw, ctx)
    one_phase = bool(cur.u8("one_phase"))
    format_id = cur.u32("format_id")
    gtrid_len = cur.u32("gtrid_length")
    bqual_len = cur.u32("bqual_length")
    if gtrid_len > 64 or bqual_len > 64:
        raise BinlogFormatError(f"xid lengths {gtrid_len}/{bqual_len} exceed 64")
    return XaPrepareEvent(
        one_phase, format_id, cur.take(gtrid_len, "gtrid"), cur.take(bqual_len, "bqual")
    )


@dataclass(frozen=True, slots=True)
class UnknownEvent(BinlogEvent):
    """An event type this version does not decode, kept raw (body without checksum)."""

    type_code: int
    data: bytes


def parse_unknown(raw: RawEvent, ctx: DecodeContext) -> UnknownEvent:
    return UnknownEvent(raw.type_code, bytes(raw.body))
