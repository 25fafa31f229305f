"""Event bodies and :func:`parse_event`, the one dispatch table from type code to parser.

``parse_event(raw, ctx)`` turns a framed :class:`~headwater.binlog.framing.RawEvent` into a
frozen dataclass of its family (listed in ``__all__``), using and updating a
:class:`DecodeContext` (current FORMAT_DESCRIPTION, TABLE_MAPs by table id). Type codes
without a parser -- LOAD DATA blocks, IGNORABLE, VIEW_CHANGE, START_ENCRYPTION, codes newer
than this version -- become :class:`UnknownEvent` with the body kept raw, never an error.

Invariant: the only exceptions :func:`parse_event` raises are
:class:`~headwater.errors.BinlogFormatError` and its subclasses, carrying the source name,
the event's offset and its type name. A body shorter than a field it must contain is a
:class:`~headwater.errors.TruncatedError`. Errors from the byte-level helpers
(``struct.error``, ``IndexError``, ``UnicodeDecodeError``, zlib and zstd errors...) are
caught here and re-raised typed, so corrupt input can never surface as anything else.

Families live in private modules: ``_control`` (ROTATE, XID, INTVAR, RAND, USER_VAR,
HEARTBEAT, ...), ``_query`` (QUERY and its status variables), ``_gtid`` (both servers'
GTID events), ``_payload`` (TRANSACTION_PAYLOAD); TABLE_MAP is
:mod:`headwater.binlog.tablemap` and the rows events :mod:`headwater.binlog.rows`.
"""

from __future__ import annotations

import gzip
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import TypeAlias

import zstandard

from headwater.binlog._context import (
    DEFAULT_MAX_UNCOMPRESSED,
    TABLE_MAP_CACHE_SIZE,
    BinlogEvent,
    ColumnsSupplier,
    DecodeContext,
)
from headwater.binlog._control import (
    AnnotateRowsEvent,
    BinlogCheckpointEvent,
    FormatDescriptionEvent,
    HeartbeatEvent,
    IncidentEvent,
    IntvarEvent,
    RandEvent,
    RotateEvent,
    RowsQueryEvent,
    StopEvent,
    UnknownEvent,
    UserVarEvent,
    XaPrepareEvent,
    XidEvent,
    parse_annotate_rows,
    parse_binlog_checkpoint,
    parse_format_description,
    parse_heartbeat,
    parse_heartbeat_v2,
    parse_incident,
    parse_intvar,
    parse_rand,
    parse_rotate,
    parse_rows_query,
    parse_stop,
    parse_unknown,
    parse_user_var,
    parse_xa_prepare,
    parse_xid,
)
from headwater.binlog._gtid import (
    GtidEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    PreviousGtidsEvent,
    parse_gtid,
    parse_gtid_tagged,
    parse_mariadb_gtid,
    parse_mariadb_gtid_list,
    parse_previous_gtids,
)
from headwater.binlog._payload import (
    TransactionPayloadEvent,
    iter_payload_events,
    parse_transaction_payload,
)
from headwater.binlog._query import QueryEvent, QueryStatus, parse_query
from headwater.binlog.constants import EventType
from headwater.binlog.framing import RawEvent, iter_buffer_events, iter_file_events
from headwater.binlog.rows import RowsEvent, parse_rows_event, rows_event_table_id
from headwater.binlog.tablemap import TableMap, parse_table_map
from headwater.errors import BinlogFormatError, TruncatedError

__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED",
    "ROWS_EVENT_TYPES",
    "AnnotateRowsEvent",
    "BinlogCheckpointEvent",
    "BinlogEvent",
    "ColumnsSupplier",
    "DecodeContext",
    "Event",
    "FormatDescriptionEvent",
    "GtidEvent",
    "HeartbeatEvent",
    "IncidentEvent",
    "IntvarEvent",
    "MariadbGtidEvent",
    "MariadbGtidListEvent",
    "PreviousGtidsEvent",
    "QueryEvent",
    "QueryStatus",
    "RandEvent",
    "RotateEvent",
    "RowsEvent",
    "RowsQueryEvent",
    "StopEvent",
    "TableMap",
    "TransactionPayloadEvent",
    "UnknownEvent",
    "UserVarEvent",
    "XaPrepareEvent",
    "XidEvent",
    "iter_events",
    "iter_payload_events",
    "parse_event",
    "parse_expanded",
]

log = logging.getLogger(__name__)

#: What :func:`parse_event` returns.
Event: TypeAlias = BinlogEvent | TableMap | RowsEvent
_Parser = Callable[[RawEvent, DecodeContext], Event]

_E = EventType
#: Rows event type codes, all decoded by :mod:`headwater.binlog.rows`.
ROWS_EVENT_TYPES = frozenset(
    {
        _E.WRITE_ROWS_V1,
        _E.UPDATE_ROWS_V1,
        _E.DELETE_ROWS_V1,
        _E.WRITE_ROWS,
        _E.UPDATE_ROWS,
        _E.DELETE_ROWS,
        _E.PARTIAL_UPDATE_ROWS,
        _E.WRITE_ROWS_COMPRESSED_V1,
        _E.UPDATE_ROWS_COMPRESSED_V1,
        _E.DELETE_ROWS_COMPRESSED_V1,
        _E.WRITE_ROWS_COMPRESSED,
        _E.UPDATE_ROWS_COMPRESSED,
        _E.DELETE_ROWS_COMPRESSED,
    }
)


def _parse_table_map(raw: RawEvent, ctx: DecodeContext) -> TableMap:
    body = bytes(raw.body)
    cache = ctx.table_map_cache
    table_map = cache.get(body)
    if table_map is None:
        mariadb = ctx.fde is not None and ctx.fde.is_mariadb
        table_map = parse_table_map(body, table_id_size=ctx.table_id_size, mariadb=mariadb)
        if len(cache) >= TABLE_MAP_CACHE_SIZE:
            cache.clear()
        cache[body] = table_map
    ctx.table_maps[table_map.table_id] = table_map
    return table_map


def _parse_rows(raw: RawEvent, ctx: DecodeContext) -> RowsEvent:
    size = ctx.table_id_size
    body = raw.body
    table_id = rows_event_table_id(body, table_id_size=size)
    table_map = ctx.table_maps.get(table_id)
    if table_map is None:
        raise BinlogFormatError(
            f"rows event for table id {table_id} without a TABLE_MAP before it (start the "
            "read at a transaction boundary)"
        )
    columns = ctx.columns(table_map) if ctx.columns is not None else None
    event = parse_rows_event(
        raw.type_code, body, table_map=table_map, table_id_size=size, columns=columns
    )
    if event.is_statement_end:
        ctx.table_maps.clear()
    return event


_DISPATCH: dict[int, _Parser] = {
    _E.FORMAT_DESCRIPTION: parse_format_description,
    _E.ROTATE: parse_rotate,
    _E.STOP: parse_stop,
    _E.QUERY: parse_query,
    _E.EXECUTE_LOAD_QUERY: parse_query,
    _E.QUERY_COMPRESSED: parse_query,
    _E.XID: parse_xid,
    _E.INTVAR: parse_intvar,
    _E.RAND: parse_rand,
    _E.USER_VAR: parse_user_var,
    _E.INCIDENT: parse_incident,
    _E.HEARTBEAT: parse_heartbeat,
    _E.HEARTBEAT_V2: parse_heartbeat_v2,
    _E.ROWS_QUERY: parse_rows_query,
    _E.XA_PREPARE: parse_xa_prepare,
    _E.TABLE_MAP: _parse_table_map,
    _E.GTID: parse_gtid,
    _E.ANONYMOUS_GTID: parse_gtid,
    _E.GTID_TAGGED: parse_gtid_tagged,
    _E.PREVIOUS_GTIDS: parse_previous_gtids,
    _E.TRANSACTION_PAYLOAD: parse_transaction_payload,
    _E.ANNOTATE_ROWS: parse_annotate_rows,
    _E.BINLOG_CHECKPOINT: parse_binlog_checkpoint,
    _E.MARIADB_GTID: parse_mariadb_gtid,
    _E.MARIADB_GTID_LIST: parse_mariadb_gtid_list,
    **dict.fromkeys(ROWS_EVENT_TYPES, _parse_rows),
}

# Exceptions of the byte-level helpers that mean "these bytes do not parse".
_SHORT = (struct.error, IndexError)
_MALFORMED = (
    ValueError,
    OverflowError,
    LookupError,
    zlib.error,
    zstandard.ZstdError,
    RecursionError,
)


def _malformed_text(e: BaseException) -> str:
    """What a :data:`_MALFORMED` failure says about the event, without Python class names."""
    if isinstance(e, UnicodeDecodeError):
        return f"text that is not valid {e.encoding} at byte {e.start}"
    if isinstance(e, zlib.error | zstandard.ZstdError):
        return f"compressed data does not inflate ({e})"
    if isinstance(e, RecursionError):
        return "values nested too deeply"
    if isinstance(e, OverflowError):
        return "a value out of range"
    if isinstance(e, LookupError):
        return "a code that is not one of the format's values"
    return str(e)


def parse_event(raw: RawEvent, ctx: DecodeContext) -> Event:
    """Decode one framed event's body; see the module docstring for the guarantees."""
    parser = _DISPATCH.get(raw.type_code, parse_unknown)
    try:
        return parser(raw, ctx)
    except BinlogFormatError as e:
        raise e.located(source=ctx.source, offset=raw.offset, event_type=raw.type_name) from None
    except _SHORT:
        # The helpers' own texts (struct's "unpack_from requires a buffer of N bytes",
        # numpy's "index out of bounds") speak of Python, not of the event: say what it is.
        raise TruncatedError(
            f"a field runs past the end of the {len(raw.body)}-byte body",
            source=ctx.source,
            offset=raw.offset,
            event_type=raw.type_name,
        ) from None
    except _MALFORMED as e:
        raise BinlogFormatError(
            f"malformed body: {_malformed_text(e)}",
            source=ctx.source,
            offset=raw.offset,
            event_type=raw.type_name,
        ) from None


def iter_events(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
    start: int = 4,
    *,
    ctx: DecodeContext | None = None,
    verify: bool = True,
) -> Iterator[tuple[RawEvent, Event]]:
    """Frame and decode a binlog file (a path, or its bytes) from ``start``.

    The FORMAT_DESCRIPTION at offset 4 is always read first, so events after ``start`` are
    decoded with it. A TRANSACTION_PAYLOAD is yielded, then each event inside it (its
    ``RawEvent.offset`` is the payload's). A path to a gzip file (``.gz`` magic) is
    decompressed in memory.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = "<buffer>"
        buf: bytes | memoryview | None = memoryview(source)
    else:
        name = os.fspath(source)
        buf = _read_if_gzip(name)
    if ctx is None:
        ctx = DecodeContext(source=name)
    elif ctx.source is None:
        ctx.source = name

    def frames(begin: int) -> Iterator[RawEvent]:
        if buf is None:
            return iter_file_events(name, start=begin, verify=verify)
        return iter_buffer_events(buf, source=name, start=begin, verify=verify)

    if start > 4:
        for raw in frames(4):
            parse_event(raw, ctx)  # the FORMAT_DESCRIPTION: sets ctx.fde
            break
    for raw in frames(start):
        yield from parse_expanded(raw, ctx)


def parse_expanded(raw: RawEvent, ctx: DecodeContext) -> Iterator[tuple[RawEvent, Event]]:
    """:func:`parse_event`, followed by the inner events of a TRANSACTION_PAYLOAD."""
    event = parse_event(raw, ctx)
    yield raw, event
    if isinstance(event, TransactionPayloadEvent):
        for inner in iter_payload_events(
            raw, event, max_size=ctx.max_uncompressed, source=ctx.source
        ):
            yield inner, parse_event(inner, ctx)


def _read_if_gzip(path: str) -> bytes | None:
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return None
    log.debug("%s is gzip-compressed; decompressing in memory", path)
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise BinlogFormatError(f"bad gzip file: {e}", source=path, offset=0) from None
