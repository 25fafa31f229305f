"""WRITE/UPDATE/DELETE_ROWS (v1, v2), PARTIAL_UPDATE_ROWS and MariaDB's compressed rows.

Body layout (MySQL ``libs/mysql/binlog/event/rows_event.h``, ``Rows_event``; MariaDB
``sql/log_event.h``, ``Rows_log_event``)::

    post-header
      table_id       u48 LE (u32 with a 6-byte TABLE_MAP post-header, MySQL 5.1.0-15)
      flags          u16 LE (STMT_END_F = 1, ...)
      [v2 only]      extra_len u16 LE (counts itself), extra data of extra_len - 2 bytes:
                     tagged items, ROWS_V_EXTRAINFO_TAG (0: NDB info, its first byte its
                     own length) and ROWS_V_TAG_PART_INFO (1: u16 partition id, + u16
                     source partition id in updates)
    body
      width          packed integer: columns of the table
      columns        ceil(width / 8) bytes, bit i (LSB first) = column i is in the images
                     (the before image for UPDATE, the only image otherwise)
      [update]       ceil(width / 8) bytes: the columns of the after image
      rows           images back to back until the end; UPDATE: before image, after image
                     per row; each image as described in :mod:`.codec`

Versions: v1 is 23-25 (MariaDB writes only these), v2 is 30-32 (MySQL 5.6+), PARTIAL_UPDATE
_ROWS is 39 (v2 layout; MySQL 8 with ``binlog_row_value_options=PARTIAL_JSON``): each after
image starts with ``value_options`` (packed integer) and, when its bit 0
(PARTIAL_JSON_UPDATES) is set, ``partial_bits``: one bit per JSON column *of the table*
(LSB first); a set bit means that column's value in this after image is a JSON diff vector
(``sql/rpl_record.cc``, ``pack_row`` / ``start_partial_bit_reader``). The diffs are applied
to the before image's value of the column (:func:`headwater.binlog.jsonb.apply_json_diffs`);
when the before image lacks it (binlog_row_image=MINIMAL), the value stays a
:class:`~headwater.binlog.codec.PartialJson`.

MariaDB compressed rows events (166-168 v1, 169-171 v2; ``log_bin_compress=ON``) keep
post-header, width and bitmaps as above; the rows part is ``header u8`` (0x80 | bytes of
the length), the uncompressed length big endian in that many bytes, then a zlib stream
(MariaDB ``sql/log_event.cc``, ``row_log_event_uncompress`` and
``binlog_get_uncompress_len``).

The pre-GA rows events (20-22, MySQL 5.1.0-5.1.17) are refused with a
:class:`BinlogFormatError`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from headwater.binlog._frozen import maker
from headwater.binlog.codec import (
    DECODE_ERRORS,
    ColumnDef,
    PartialJson,
    RowDecoder,
    row_decoder_for,
)
from headwater.binlog.constants import EventType
from headwater.binlog.framing import event_type_name
from headwater.binlog.jsonb import apply_json_diffs
from headwater.binlog.tablemap import TableMap, read_packed_int
from headwater.errors import BinlogFormatError, TruncatedError

__all__ = [
    "ROWS_EVENT_TYPES",
    "STMT_END_F",
    "RowsEvent",
    "count_rows",
    "parse_rows_event",
    "row_counter",
    "rows_event_table_id",
]

#: Rows event flag: the last rows event of its statement (table maps may be dropped).
STMT_END_F = 0x0001

_E = EventType
Kind = Literal["insert", "update", "delete"]

# type code -> (kind, version 2, MariaDB compressed)
_TYPES: dict[int, tuple[Kind, bool, bool]] = {
    _E.WRITE_ROWS_V1: ("insert", False, False),
    _E.UPDATE_ROWS_V1: ("update", False, False),
    _E.DELETE_ROWS_V1: ("delete", False, False),
    _E.WRITE_ROWS: ("insert", True, False),
    _E.UPDATE_ROWS: ("update", True, False),
    _E.DELETE_ROWS: ("delete", True, False),
    _E.PARTIAL_UPDATE_ROWS: ("update", True, False),
    _E.WRITE_ROWS_COMPRESSED_V1: ("insert", False, True),
    _E.UPDATE_ROWS_COMPRESSED_V1: ("update", False, True),
    _E.DELETE_ROWS_COMPRESSED_V1: ("delete", False, True),
    _E.WRITE_ROWS_COMPRESSED: ("insert", True, True),
    _E.UPDATE_ROWS_COMPRESSED: ("update", True, True),
    _E.DELETE_ROWS_COMPRESSED: ("delete", True, True),
}
#: Every event type code :func:`parse_rows_event` decodes.
ROWS_EVENT_TYPES = frozenset(_TYPES)
_PRE_GA = frozenset({_E.PRE_GA_WRITE_ROWS, _E.PRE_GA_UPDATE_ROWS, _E.PRE_GA_DELETE_ROWS})

_EXTRAINFO_TAG = 0
_PART_INFO_TAG = 1
_PARTIAL_JSON_UPDATES = 1
#: Refuse compressed rows claiming more than this when inflated (MariaDB caps events at
#: max_allowed_packet, at most 1 GiB).
MAX_UNCOMPRESSED = 1 << 30

Row = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class RowsEvent:
    """A decoded rows event.

    ``rows`` holds value tuples for the present columns: the after images of an insert,
    the before images of a delete, ``(before, after)`` pairs for an update.
    ``columns_before``/``columns_after`` are the table column indexes of those tuples'
    entries (empty for the image an event kind does not have). ``extra_data`` is the raw
    v2 extra data, ``extra_info`` what of it is understood (``ndb_info`` bytes,
    ``partition_id``, ``source_partition_id``).
    """

    kind: Kind
    type_code: int
    table_id: int
    flags: int
    table_map: TableMap
    width: int
    columns_before: tuple[int, ...]
    columns_after: tuple[int, ...]
    rows: list[Row] | list[tuple[Row, Row]]
    extra_data: bytes = b""
    extra_info: dict[str, object] = field(default_factory=dict)

    @property
    def is_statement_end(self) -> bool:
        return bool(self.flags & STMT_END_F)

    @property
    def is_partial_update(self) -> bool:
        return self.type_code == _E.PARTIAL_UPDATE_ROWS

    def column_names(self, columns: Sequence[ColumnDef] | None = None) -> tuple[str, ...]:
        """Names of all the table's columns: TABLE_MAP names (binlog_row_metadata=FULL),
        else ``columns`` (schema history), else ``@1``, ``@2``, ... as mysqlbinlog prints."""
        if self.table_map.column_names is not None:
            return self.table_map.column_names
        if columns is not None and len(columns) == self.width:
            return tuple(c.name for c in columns)
        return tuple(f"@{i + 1}" for i in range(self.width))

    def as_dicts(
        self, columns: Sequence[ColumnDef] | None = None
    ) -> list[dict[str, object]] | list[tuple[dict[str, object], dict[str, object]]]:
        """``rows`` with each image as ``{column name: value}`` of its present columns."""
        names = self.column_names(columns)
        before = [names[i] for i in self.columns_before]
        after = [names[i] for i in self.columns_after]
        rows: list[Any] = self.rows
        if self.kind == "update":
            return [
                (dict(zip(before, b, strict=True)), dict(zip(after, a, strict=True)))
                for b, a in rows
            ]
        keys = after if self.kind == "insert" else before
        return [dict(zip(keys, r, strict=True)) for r in rows]


#: RowsEvent(...) at the cost of a plain class (see headwater.binlog._frozen).
_make_rows_event = maker(RowsEvent)


def rows_event_table_id(body: bytes | memoryview, *, table_id_size: int = 6) -> int:
    """The table id of a rows event, without decoding anything else."""
    if len(body) < table_id_size:
        raise TruncatedError(f"rows event body of {len(body)} bytes")
    return int.from_bytes(body[:table_id_size], "little")


#: Column index tuples by (bitmap bytes, width): a table's events repeat the same bitmaps.
_BITMAPS: dict[tuple[bytes, int], tuple[int, ...]] = {}
_BITMAPS_MAX = 4096


def _bitmap_columns(buf: bytes, pos: int, width: int) -> tuple[tuple[int, ...], int]:
    end = pos + (width + 7) // 8
    if end > len(buf):
        raise TruncatedError("rows event columns bitmap runs past the end")
    key = (buf[pos:end], width)
    columns = _BITMAPS.get(key)
    if columns is None:
        bits = int.from_bytes(key[0], "little")
        columns = tuple(i for i in range(width) if bits >> i & 1)
        if len(_BITMAPS) >= _BITMAPS_MAX:
            _BITMAPS.clear()
        _BITMAPS[key] = columns
    return columns, end


def _extra_info(data: bytes, kind: Kind) -> dict[str, object]:
    info: dict[str, object] = {}
    pos = 0
    while pos < len(data):
        tag = data[pos]
        pos += 1
        if tag == _EXTRAINFO_TAG and pos < len(data):
            length = data[pos]  # counts its own length and format bytes
            info["ndb_info"] = data[pos : pos + length]
            pos += max(length, 1)
        elif tag == _PART_INFO_TAG and pos + 2 <= len(data):
            info["partition_id"] = int.from_bytes(data[pos : pos + 2], "little")
            pos += 2
            if kind == "update" and pos + 2 <= len(data):
                info["source_partition_id"] = int.from_bytes(data[pos : pos + 2], "little")
                pos += 2
        else:
            break  # an item this version does not know: the raw bytes stay in extra_data
    return info


def _inflate(buf: bytes, pos: int) -> bytes:
    """MariaDB compressed rows: header, big-endian length, zlib stream -> rows bytes."""
    if pos >= len(buf):
        raise TruncatedError("compressed rows event without its compression header")
    header = buf[pos]
    lenlen = header & 0x07
    if header & 0xE0 != 0x80 or not 1 <= lenlen <= 4:
        raise BinlogFormatError(f"compressed rows header byte 0x{header:02x} is not valid")
    if pos + 1 + lenlen > len(buf):
        raise TruncatedError("compressed rows length runs past the end")
    size = int.from_bytes(buf[pos + 1 : pos + 1 + lenlen], "big")
    if size > MAX_UNCOMPRESSED:
        raise BinlogFormatError(f"compressed rows claim {size} bytes uncompressed")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(buf[pos + 1 + lenlen :], size + 1)
    except zlib.error as exc:
        raise BinlogFormatError(f"compressed rows do not inflate: {exc}") from None
    if len(out) != size or not inflater.eof:
        raise BinlogFormatError(f"compressed rows inflate to {len(out)} bytes, header says {size}")
    return out


def parse_rows_event(
    type_code: int,
    body: bytes | memoryview,
    *,
    table_map: TableMap,
    table_id_size: int = 6,
    columns: Sequence[ColumnDef] | None = None,
) -> RowsEvent:
    """Decode a rows event body (after the 19-byte header, checksum stripped).

    ``table_map`` is the TABLE_MAP for the event's table id (see
    :func:`rows_event_table_id`); ``columns`` the schema history's definitions, used where
    the TABLE_MAP has MINIMAL metadata. Raises :class:`TruncatedError` or
    :class:`BinlogFormatError` (with the event type filled in) on bytes that do not decode.
    """
    try:
        return _parse(type_code, bytes(body), table_map, table_id_size, columns)
    except BinlogFormatError as exc:
        raise exc.located(event_type=event_type_name(type_code)) from None
    except DECODE_ERRORS:
        raise TruncatedError(
            f"rows event ends early: a length or count in its {len(body)}-byte body points"
            " past the end",
            event_type=event_type_name(type_code),
        ) from None


_Layout = tuple[Kind, int, bytes, int, tuple[int, ...], tuple[int, ...], bytes, int]

#: _layout's answers for headers seen before: every rows event of a statement repeats its
#: header (table id, flags, extra data, width, bitmaps), and MariaDB cuts a statement's rows
#: into events of binlog_row_event_max_size (8 KiB by default), dozens per 1000-row
#: statement. Keyed by everything _layout reads: type code, table id size, the TABLE_MAP's
#: table id and column count, and the header's bytes.
_LAYOUTS: dict[tuple[object, ...], _Layout] = {}
_LAYOUTS_MAX = 4096


def _header_size(type_code: int, buf: bytes, table_map: TableMap, table_id_size: int) -> int:
    """Where the row images of an uncompressed rows event of ``table_map`` start, if its
    width is the map's; 0 when that cannot be told cheaply (compressed, JSON diffs, short)."""
    spec = _TYPES.get(type_code)
    if spec is None or spec[2] or type_code == _E.PARTIAL_UPDATE_ROWS:
        return 0
    pos = table_id_size + 2
    if spec[1]:
        if len(buf) < pos + 2:
            return 0
        pos += buf[pos] | buf[pos + 1] << 8
    width = table_map.column_count
    pos += (1 if width < 251 else 3 if width < 1 << 16 else 4 if width < 1 << 24 else 9) + (
        (width + 7) // 8 * (2 if spec[0] == "update" else 1)
    )
    return pos if pos <= len(buf) else 0


#: The header _cached_layout answered last, as ``(table_map, type_code, table_id_size,
#: header bytes, layout)``: consecutive rows events of a statement start with the same
#: bytes (all but its last, whose flags carry STMT_END_F), and a body that starts with
#: them has that layout, as _layout reads nothing past them. One entry, replaced whole
#: (so threads sharing it read a consistent one); it holds its TableMap, so identity
#: comparisons against it are sound.
_LAST: list[tuple[TableMap | None, int, int, bytes, _Layout | None]] = [(None, 0, 0, b"", None)]


def _cached_layout(type_code: int, buf: bytes, table_map: TableMap, table_id_size: int) -> _Layout:
    last_map, last_type, last_size, last_head, last_layout = _LAST[0]
    if (
        last_map is table_map
        and last_type == type_code
        and last_size == table_id_size
        and buf.startswith(last_head)
        and last_layout is not None
    ):
        kind, flags, extra, width, first, second, _b, pos = last_layout
        return kind, flags, extra, width, first, second, buf, pos
    size = _header_size(type_code, buf, table_map, table_id_size)
    if not size:
        return _layout(type_code, buf, table_map, table_id_size)
    head = buf[:size]
    key = (type_code, table_id_size, table_map.table_id, table_map.column_count, head)
    known = _LAYOUTS.get(key)
    if known is None:
        layout = _layout(type_code, buf, table_map, table_id_size)
        if layout[7] != size:
            return layout
        known = (*layout[:6], b"", layout[7])
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = known
    _LAST[0] = (table_map, type_code, table_id_size, head, known)
    kind, flags, extra, width, first, second, _b, pos = known
    return kind, flags, extra, width, first, second, buf, pos


def _parse(
    type_code: int,
    buf: bytes,
    table_map: TableMap,
    table_id_size: int,
    columns: Sequence[ColumnDef] | None,
) -> RowsEvent:
    kind, flags, extra, width, first, second, buf, pos = _cached_layout(
        type_code, buf, table_map, table_id_size
    )
    end = len(buf)
    table_id = table_map.table_id
    decoder = row_decoder_for(table_map, columns)
    rows: list[Row] | list[tuple[Row, Row]]
    if kind == "update":
        if type_code == _E.PARTIAL_UPDATE_ROWS:
            rows = _partial_pairs(decoder, buf, pos, end, first, second)
        else:
            rows = decoder.decode_row_pairs(buf, pos, end, first, second)
        before, after = first, second
    else:
        rows = decoder.decode_rows(buf, pos, end, first) if pos < end else []
        before, after = (first, ()) if kind == "delete" else ((), first)
    return _make_rows_event(
        kind,
        type_code,
        table_id,
        flags,
        table_map,
        width,
        before,
        after,
        rows,
        extra,
        _extra_info(extra, kind) if extra else {},
    )


def count_rows(
    type_code: int, body: bytes | memoryview, *, table_map: TableMap, table_id_size: int = 6
) -> int:
    """How many rows a rows event holds, without decoding a value: the row images are
    walked by their lengths (:meth:`RowDecoder.count_rows`, code generated per image
    shape). The same count as ``len(parse_rows_event(...).rows)``, raising the same errors
    on bytes that do not frame. PARTIAL_UPDATE_ROWS (MySQL JSON diffs) is decoded."""
    try:
        if type_code == _E.PARTIAL_UPDATE_ROWS:
            return len(_parse(type_code, bytes(body), table_map, table_id_size, None).rows)
        buf = body if isinstance(body, bytes) else bytes(body)
        kind, _f, _x, _w, first, second, buf, pos = _cached_layout(
            type_code, buf, table_map, table_id_size
        )
        if pos >= len(buf):
            return 0
        decoder = row_decoder_for(table_map)
        return decoder.count_rows(buf, pos, len(buf), first, second if kind == "update" else None)
    except BinlogFormatError as exc:
        raise exc.located(event_type=event_type_name(type_code)) from None
    except DECODE_ERRORS:
        raise TruncatedError(
            f"rows event ends early: a length or count in its {len(body)}-byte body points"
            " past the end",
            event_type=event_type_name(type_code),
        ) from None


def row_counter(
    type_code: int, body: bytes | memoryview, *, table_map: TableMap, table_id_size: int = 6
) -> tuple[int, Callable[[Any, int, int], int]] | None:
    """``(rows_start, count)`` for events of this type and table whose ``body`` starts
    with the same ``rows_start`` bytes (post-header, width, bitmaps): ``count(body,
    rows_start, len(body))`` is :func:`count_rows` without parsing the header again. None
    for events whose rows are compressed or hold JSON diffs (use :func:`count_rows`)."""
    if type_code == _E.PARTIAL_UPDATE_ROWS or _TYPES.get(type_code, ("", False, True))[2]:
        return None
    buf = bytes(body)
    kind, _f, _x, _w, first, second, _b, pos = _layout(type_code, buf, table_map, table_id_size)
    if not first or (kind == "update" and not second):
        return None
    decoder = row_decoder_for(table_map)
    return pos, decoder._count_fn(first, second if kind == "update" else ())


def _layout(
    type_code: int, buf: bytes, table_map: TableMap, table_id_size: int
) -> tuple[Kind, int, bytes, int, tuple[int, ...], tuple[int, ...], bytes, int]:
    """Kind, flags, extra data, width, present columns of the first and second image,
    the buffer (inflated when compressed) and the position of the first row image."""
    if type_code in _PRE_GA:
        raise BinlogFormatError("pre-GA rows events (MySQL 5.1.0-5.1.17) are not supported")
    spec = _TYPES.get(type_code)
    if spec is None:
        raise BinlogFormatError(f"event type {type_code} is not a rows event")
    kind, v2, compressed = spec
    head = table_id_size + 2
    if len(buf) < head + (2 if v2 else 0):
        raise TruncatedError(f"rows event body of {len(buf)} bytes")
    table_id = int.from_bytes(buf[:table_id_size], "little")
    flags = int.from_bytes(buf[table_id_size:head], "little")
    if table_id != table_map.table_id:
        raise BinlogFormatError(
            f"rows event for table id {table_id} given the TABLE_MAP of {table_map.table_id}"
        )
    pos = head
    extra = b""
    if v2:
        extra_len = int.from_bytes(buf[pos : pos + 2], "little")
        if extra_len < 2 or pos + extra_len > len(buf):
            raise TruncatedError(f"rows event extra data of {extra_len} bytes")
        extra = buf[pos + 2 : pos + extra_len]
        pos += extra_len
    width, pos = read_packed_int(buf, pos, len(buf))
    if width != table_map.column_count:
        raise BinlogFormatError(
            f"rows event has {width} columns, its TABLE_MAP {table_map.column_count}"
        )
    first, pos = _bitmap_columns(buf, pos, width)
    second: tuple[int, ...] = ()
    if kind == "update":
        second, pos = _bitmap_columns(buf, pos, width)
    if compressed:
        buf = buf[:pos] + _inflate(buf, pos)
    return kind, flags, extra, width, first, second, buf, pos


def _partial_pairs(
    decoder: RowDecoder,
    buf: bytes,
    pos: int,
    end: int,
    before_cols: tuple[int, ...],
    after_cols: tuple[int, ...],
) -> list[tuple[Row, Row]]:
    """PARTIAL_UPDATE_ROWS: value_options and partial_bits lead every after image."""
    nbytes = (decoder.table_map.json_column_count + 7) // 8
    out: list[tuple[Row, Row]] = []
    while pos < end:
        before, pos = decoder.decode_image(buf, pos, before_cols)
        options, pos = read_packed_int(buf, pos, end)
        partial = 0
        if options & _PARTIAL_JSON_UPDATES:
            if pos + nbytes > end:
                raise TruncatedError("partial_bits run past the end of the event")
            partial = int.from_bytes(buf[pos : pos + nbytes], "little")
            pos += nbytes
        after, pos = decoder.decode_image(buf, pos, after_cols, partial_json=partial)
        if partial:
            after = _apply_partial(before, after, before_cols, after_cols)
        out.append((before, after))
    return out


def _apply_partial(
    before: Row, after: Row, before_cols: tuple[int, ...], after_cols: tuple[int, ...]
) -> Row:
    where = {c: i for i, c in enumerate(before_cols)}
    values = list(after)
    for j, value in enumerate(values):
        if isinstance(value, PartialJson):
            i = where.get(after_cols[j])
            old = before[i] if i is not None else None
            if isinstance(old, str):
                values[j] = apply_json_diffs(old, list(value.diffs))
    return tuple(values)
