"""TABLE_MAP events: which table a table id stands for, its column types and metadata.

Body layout (MySQL ``libs/mysql/binlog/event/rows_event.cpp``, ``Table_map_event``
constructor; MariaDB ``sql/log_event.cc``, ``Table_map_log_event``)::

    post-header
      table_id      u48 LE (u32 when the FORMAT_DESCRIPTION says post-header 6, MySQL 5.1.0-15)
      flags         u16 LE
    body
      schema_len u8, schema bytes, 0x00
      table_len  u8, table bytes, 0x00
      column_count      packed integer (net_field_length)
      column_types      column_count bytes
      metadata_len      packed integer
      metadata          per column, 0-2 bytes depending on the type (see below)
      null_bits         (column_count + 7) / 8 bytes, bit i (LSB first) = column i nullable
      optional metadata (MySQL 8.0.1+ / MariaDB 10.5+, binlog_row_metadata=MINIMAL|FULL)
                        a sequence of TLVs: type u8, length packed integer, value

Per-type metadata (``Field::do_save_field_metadata`` in MySQL ``sql/field.cc``) decoded
into one ``int`` per column in :attr:`TableMap.column_meta`:

=========================================  ===============================================
FLOAT, DOUBLE                              1 byte: pack length (4 or 8)
BLOB family, GEOMETRY, JSON, VECTOR        1 byte: bytes of the length prefix (1-4)
TIME2, DATETIME2, TIMESTAMP2               1 byte: fractional seconds precision (0-6)
VARCHAR, VAR_STRING                        2 bytes LE: maximum length in bytes
BIT                                        2 bytes: bits % 8, then whole bytes ->
                                           ``bytes << 8 | bits``
NEWDECIMAL                                 2 bytes: precision, scale -> ``prec << 8 | scale``
STRING (CHAR, BINARY, ENUM, SET)           2 bytes: real type, then length byte ->
                                           ``b0 << 8 | b1`` (big endian)
everything else                            none -> 0
=========================================  ===============================================

For STRING columns, :attr:`TableMap.column_types` holds the *real* type: ENUM (247) or SET
(248) when the first metadata byte says so (MySQL ``log_event_print_value``; both servers
write ENUM/SET columns as MYSQL_TYPE_STRING), with the metadata kept as is: the second
byte is then the pack length (1-2 for ENUM, 1-8 for SET).

Optional metadata TLVs (``enum Optional_metadata_field_type``, MySQL
``libs/mysql/binlog/event/rows_event.h``; written by ``Table_map_log_event::init_*_field`` in
MySQL ``sql/log_event.cc``) are decoded into the typed attributes; unknown types are kept
raw in :attr:`TableMap.unknown_metadata` and never fail the parse. Which columns each field
counts (types as they stand in :attr:`TableMap.column_types`, i.e. ENUM/SET resolved):

=============================  ==========================================================
SIGNEDNESS                     one bit (MSB first) per numeric column: TINY, SHORT, INT24,
                               LONG, LONGLONG, FLOAT, DOUBLE, NEWDECIMAL (``is_numeric_type``)
DEFAULT_CHARSET,               one entry per character column: STRING, VAR_STRING,
COLUMN_CHARSET                 VARCHAR, the BLOB family and, MySQL 9.0+, VECTOR
                               (``is_character_type`` lists MYSQL_TYPE_VECTOR; a VECTOR's
                               collation is binary, 63); DEFAULT_CHARSET's exceptions are
                               indexed among these columns only
COLUMN_NAME                    every column
SET_STR_VALUE / ENUM_STR_VALUE one list per SET / ENUM column
GEOMETRY_TYPE                  one entry per GEOMETRY column
SIMPLE_PRIMARY_KEY,            column indexes (and prefix lengths) over all columns
PRIMARY_KEY_WITH_PREFIX
ENUM_AND_SET_DEFAULT_CHARSET,  one entry per ENUM or SET column
ENUM_AND_SET_COLUMN_CHARSET
COLUMN_VISIBILITY              one bit (MSB first) per column (MySQL 8.0.23+)
VECTOR_DIMENSIONALITY          one entry per VECTOR column (MySQL 9.0+,
                               ``init_vector_dimensionality_field``)
=============================  ==========================================================

MariaDB counts differently (``mariadb=True``): every ``Field_num`` has a signedness bit,
which adds YEAR and the old DECIMAL (``Table_map_log_event::init_signedness_field`` tests
``Binlog_type_info::m_signedness``, and ``Field_year`` derives from ``Field_tiny``,
``sql/field.h``), GEOMETRY (a ``Field_blob``) is a character column (``is_character_type``
in ``sql/log_event_client.cc``), and it has no VECTOR type code.

Invariants: every tuple indexed by column has exactly ``column_count`` entries; ``None``
means "not in the event" (MINIMAL metadata), never "empty".
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from headwater.binlog.constants import ColumnType
from headwater.errors import BinlogFormatError, TruncatedError

__all__ = [
    "CHARACTER_TYPES",
    "CHARACTER_TYPES_MARIADB",
    "NUMERIC_TYPES",
    "NUMERIC_TYPES_MARIADB",
    "OptionalMetadataType",
    "TableMap",
    "parse_table_map",
    "read_packed_int",
]

_T = ColumnType
_V = TypeVar("_V")


class OptionalMetadataType:
    """TLV type codes of the optional metadata (MySQL rows_event.h)."""

    SIGNEDNESS = 1
    DEFAULT_CHARSET = 2
    COLUMN_CHARSET = 3
    COLUMN_NAME = 4
    SET_STR_VALUE = 5
    ENUM_STR_VALUE = 6
    GEOMETRY_TYPE = 7
    SIMPLE_PRIMARY_KEY = 8
    PRIMARY_KEY_WITH_PREFIX = 9
    ENUM_AND_SET_DEFAULT_CHARSET = 10
    ENUM_AND_SET_COLUMN_CHARSET = 11
    COLUMN_VISIBILITY = 12
    VECTOR_DIMENSIONALITY = 13


#: Columns that have a bit in the SIGNEDNESS field (MySQL ``is_numeric_type``).
NUMERIC_TYPES = frozenset(
    {_T.TINY, _T.SHORT, _T.INT24, _T.LONG, _T.LONGLONG, _T.FLOAT, _T.DOUBLE, _T.NEWDECIMAL}
)
_TEXT_TYPES = frozenset(
    {
        _T.STRING,
        _T.VAR_STRING,
        _T.VARCHAR,
        _T.BLOB,
        _T.TINY_BLOB,
        _T.MEDIUM_BLOB,
        _T.LONG_BLOB,
    }
)
#: Columns with an entry in DEFAULT_CHARSET / COLUMN_CHARSET (MySQL ``is_character_type``,
#: which lists VECTOR since 9.0: a column after a VECTOR takes the next entry, not the
#: VECTOR's).
CHARACTER_TYPES = _TEXT_TYPES | {_T.VECTOR}
#: MariaDB's sets (see the module docstring).
NUMERIC_TYPES_MARIADB = NUMERIC_TYPES | {_T.YEAR, _T.DECIMAL}
CHARACTER_TYPES_MARIADB = _TEXT_TYPES | {_T.GEOMETRY}
_ENUM_SET = frozenset({_T.ENUM, _T.SET})
_ONE_BYTE_META = frozenset(
    {
        _T.FLOAT,
        _T.DOUBLE,
        _T.BLOB,
        _T.TINY_BLOB,
        _T.MEDIUM_BLOB,
        _T.LONG_BLOB,
        _T.GEOMETRY,
        _T.JSON,
        _T.VECTOR,
        _T.TIME2,
        _T.DATETIME2,
        _T.TIMESTAMP2,
    }
)
_U16 = struct.Struct("<H")
_U24 = struct.Struct("<HB")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class TableMap:
    """One TABLE_MAP event. Tuples indexed by column have ``column_count`` entries.

    ``signedness`` has one entry per column (``True`` = UNSIGNED; ``False`` for columns that
    are not numeric), ``charsets`` the collation id per column (``None`` for columns that
    carry no charset), ``enum_values``/``set_values`` the value names per column (``None``
    for columns of other types). ``primary_key`` lists column indexes and
    ``primary_key_prefixes`` the matching prefix lengths (0 = whole column).
    ``unknown_metadata`` keeps optional-metadata TLVs this version does not know, as
    ``(type, value bytes)``.
    """

    table_id: int
    flags: int
    schema: str
    table: str
    column_types: tuple[int, ...]
    column_meta: tuple[int, ...]
    nullable: tuple[bool, ...]
    signedness: tuple[bool, ...] | None = None
    charsets: tuple[int | None, ...] | None = None
    column_names: tuple[str, ...] | None = None
    set_values: tuple[tuple[str, ...] | None, ...] | None = None
    enum_values: tuple[tuple[str, ...] | None, ...] | None = None
    geometry_types: tuple[int | None, ...] | None = None
    primary_key: tuple[int, ...] | None = None
    primary_key_prefixes: tuple[int, ...] | None = None
    visibility: tuple[bool, ...] | None = None
    vector_dimensions: tuple[int | None, ...] | None = None
    unknown_metadata: tuple[tuple[int, bytes], ...] = ()

    @property
    def column_count(self) -> int:
        return len(self.column_types)

    @property
    def json_column_count(self) -> int:
        """JSON columns in the table: the width of PARTIAL_UPDATE_ROWS' partial_bits."""
        return sum(1 for t in self.column_types if t == _T.JSON)

    def shape_key(self) -> tuple[object, ...]:
        """What the row decoding depends on (everything but ids and names)."""
        return (
            self.column_types,
            self.column_meta,
            self.signedness,
            self.charsets,
            self.enum_values,
            self.set_values,
        )


def read_packed_int(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """A length-encoded integer (``net_field_length``): value and the position after it.

    < 251 is the value itself; 252 + u16, 253 + u24, 254 + u64. 251 (NULL) is not valid in
    binlog events and is rejected.
    """
    if pos >= end:
        raise TruncatedError("packed integer past the end of the event")
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    if first == 252:
        if pos + 3 > end:
            raise TruncatedError("packed integer past the end of the event")
        return _U16.unpack_from(buf, pos + 1)[0], pos + 3
    if first == 253:
        if pos + 4 > end:
            raise TruncatedError("packed integer past the end of the event")
        lo, hi = _U24.unpack_from(buf, pos + 1)
        return lo | hi << 16, pos + 4
    if first == 254:
        if pos + 9 > end:
            raise TruncatedError("packed integer past the end of the event")
        return _U64.unpack_from(buf, pos + 1)[0], pos + 9
    raise BinlogFormatError(f"invalid packed integer prefix {first}")


def _bits(data: bytes | memoryview, count: int, *, msb_first: bool) -> tuple[bool, ...]:
    if len(data) * 8 < count:
        raise TruncatedError(f"bitmap of {len(data)} bytes for {count} bits")
    if msb_first:
        return tuple(bool(data[i >> 3] & (0x80 >> (i & 7))) for i in range(count))
    return tuple(bool(data[i >> 3] & (1 << (i & 7))) for i in range(count))


def _text(raw: bytes | memoryview) -> str:
    # Identifiers and ENUM/SET names are written in the column's or the system charset
    # (utf8mb3/utf8mb4); keep undecodable bytes recoverable rather than failing.
    return bytes(raw).decode("utf-8", "surrogateescape")


def parse_table_map(
    body: bytes | memoryview, *, table_id_size: int = 6, mariadb: bool = False
) -> TableMap:
    """Parse the body (after the 19-byte header, checksum stripped) of a TABLE_MAP event.

    ``mariadb`` (``FormatDescription.is_mariadb``) selects MariaDB's rules for which
    columns the SIGNEDNESS and charset fields cover.
    """
    buf = memoryview(body)
    end = len(buf)
    try:
        return _parse(buf, end, table_id_size, mariadb)
    except (IndexError, struct.error, ValueError):  # a length pointing past the end
        # The helpers' texts (memoryview's "index out of bounds on dimension 1", struct's
        # "unpack_from requires a buffer") speak of Python: say what is wrong with the event.
        raise TruncatedError(
            f"TABLE_MAP ends early: a length or count in its {end}-byte body points past the end",
            event_type="TABLE_MAP",
        ) from None
    except BinlogFormatError as exc:
        raise exc.located(event_type="TABLE_MAP") from None


def _parse(buf: memoryview, end: int, table_id_size: int, mariadb: bool) -> TableMap:
    head = table_id_size + 2
    if end < head + 2:
        raise TruncatedError(f"TABLE_MAP body of {end} bytes")
    table_id = int.from_bytes(buf[:table_id_size], "little")
    flags = _U16.unpack_from(buf, table_id_size)[0]
    pos = head
    schema_len = buf[pos]
    schema = _text(buf[pos + 1 : pos + 1 + schema_len])
    pos += 2 + schema_len  # length, name, NUL
    table_len = buf[pos]
    table = _text(buf[pos + 1 : pos + 1 + table_len])
    pos += 2 + table_len
    if pos > end:
        raise TruncatedError("TABLE_MAP names run past the end")
    ncols, pos = read_packed_int(buf, pos, end)
    if pos + ncols > end:
        raise TruncatedError(f"TABLE_MAP with {ncols} columns ends early")
    raw_types = bytes(buf[pos : pos + ncols])
    pos += ncols
    meta_len, pos = read_packed_int(buf, pos, end)
    meta_end = pos + meta_len
    if meta_end > end:
        raise TruncatedError("TABLE_MAP metadata block runs past the end")
    types: list[int] = []
    metas: list[int] = []
    for t in raw_types:
        meta = 0
        if t in _ONE_BYTE_META:
            meta = buf[pos]
            pos += 1
        elif t in (_T.VARCHAR, _T.VAR_STRING):
            meta = _U16.unpack_from(buf, pos)[0]
            pos += 2
        elif t in (_T.NEWDECIMAL, _T.STRING, _T.ENUM, _T.SET):
            # precision, scale / real type, length: first byte is the high byte.
            meta = buf[pos] << 8 | buf[pos + 1]
            pos += 2
        elif t == _T.BIT:
            # bits % 8 first, then bytes (Field_bit::do_save_field_metadata).
            meta = buf[pos + 1] << 8 | buf[pos]
            pos += 2
        if t == _T.STRING and meta >> 8 in (_T.ENUM, _T.SET):
            t = meta >> 8
        types.append(t)
        metas.append(meta)
        if pos > meta_end:
            raise BinlogFormatError("TABLE_MAP column metadata longer than its block")
    pos = meta_end
    null_len = (ncols + 7) // 8
    if pos + null_len > end:
        raise TruncatedError("TABLE_MAP null bitmap runs past the end")
    nullable = _bits(buf[pos : pos + null_len], ncols, msb_first=False)
    pos += null_len
    opt = _Optional(tuple(types), ncols, mariadb)
    while pos < end:
        kind = buf[pos]
        length, pos = read_packed_int(buf, pos + 1, end)
        if pos + length > end:
            raise TruncatedError(f"optional metadata field {kind} runs past the end")
        opt.add(kind, buf[pos : pos + length])
        pos += length
    if opt.names is not None and len(opt.names) != ncols:
        # Table_map_log_event::init_column_name_field (MySQL sql/log_event.cc) writes one
        # name per column; a count that differs would pair values with the wrong names.
        raise BinlogFormatError(
            f"COLUMN_NAME metadata names {len(opt.names)} columns, the TABLE_MAP has {ncols}"
        )
    return TableMap(
        table_id=table_id,
        flags=flags,
        schema=schema,
        table=table,
        column_types=tuple(types),
        column_meta=tuple(metas),
        nullable=nullable,
        signedness=opt.signedness,
        charsets=opt.charsets(),
        column_names=opt.names,
        set_values=opt.per_column(opt.sets, (_T.SET,)),
        enum_values=opt.per_column(opt.enums, (_T.ENUM,)),
        geometry_types=opt.per_column(opt.geometry, (_T.GEOMETRY,)),
        primary_key=opt.pk,
        primary_key_prefixes=opt.pk_prefixes,
        visibility=opt.visibility,
        vector_dimensions=opt.per_column(opt.vector_dims, (_T.VECTOR,)),
        unknown_metadata=tuple(opt.unknown),
    )


class _Optional:
    """Accumulates the optional-metadata TLVs of one TABLE_MAP."""

    def __init__(self, types: tuple[int, ...], ncols: int, mariadb: bool) -> None:
        self.types = types
        self.ncols = ncols
        self.numeric = NUMERIC_TYPES_MARIADB if mariadb else NUMERIC_TYPES
        self.character = CHARACTER_TYPES_MARIADB if mariadb else CHARACTER_TYPES
        self.signedness: tuple[bool, ...] | None = None
        self.default_cs: tuple[int, dict[int, int]] | None = None
        self.column_cs: list[int] | None = None
        self.es_default_cs: tuple[int, dict[int, int]] | None = None
        self.es_column_cs: list[int] | None = None
        self.names: tuple[str, ...] | None = None
        self.sets: list[tuple[str, ...]] | None = None
        self.enums: list[tuple[str, ...]] | None = None
        self.geometry: list[int] | None = None
        self.vector_dims: list[int] | None = None
        self.pk: tuple[int, ...] | None = None
        self.pk_prefixes: tuple[int, ...] | None = None
        self.visibility: tuple[bool, ...] | None = None
        self.unknown: list[tuple[int, bytes]] = []

    def add(self, kind: int, v: memoryview) -> None:
        m = OptionalMetadataType
        if kind == m.SIGNEDNESS:
            numeric = [i for i, t in enumerate(self.types) if t in self.numeric]
            # One bit per numeric column, most significant bit first.
            bits = _bits(v, len(numeric), msb_first=True)
            flags = [False] * self.ncols
            for i, b in zip(numeric, bits, strict=True):
                flags[i] = b
            self.signedness = tuple(flags)
        elif kind == m.DEFAULT_CHARSET:
            self.default_cs = _default_charset(v)
        elif kind == m.COLUMN_CHARSET:
            self.column_cs = _ints(v)
        elif kind == m.ENUM_AND_SET_DEFAULT_CHARSET:
            self.es_default_cs = _default_charset(v)
        elif kind == m.ENUM_AND_SET_COLUMN_CHARSET:
            self.es_column_cs = _ints(v)
        elif kind == m.COLUMN_NAME:
            self.names = tuple(_strings(v))
        elif kind == m.SET_STR_VALUE:
            self.sets = _string_lists(v)
        elif kind == m.ENUM_STR_VALUE:
            self.enums = _string_lists(v)
        elif kind == m.GEOMETRY_TYPE:
            self.geometry = _ints(v)
        elif kind == m.VECTOR_DIMENSIONALITY:
            self.vector_dims = _ints(v)
        elif kind == m.SIMPLE_PRIMARY_KEY:
            self.pk = tuple(_ints(v))
            self.pk_prefixes = (0,) * len(self.pk)
        elif kind == m.PRIMARY_KEY_WITH_PREFIX:
            pairs = _ints(v)
            self.pk = tuple(pairs[0::2])
            self.pk_prefixes = tuple(pairs[1::2])
        elif kind == m.COLUMN_VISIBILITY:
            self.visibility = _bits(v, self.ncols, msb_first=True)
        else:
            self.unknown.append((kind, bytes(v)))

    def per_column(
        self, values: Sequence[_V] | None, kinds: tuple[int, ...]
    ) -> tuple[_V | None, ...] | None:
        """Spread a list with one entry per column of ``kinds`` over all columns."""
        if values is None:
            return None
        it = iter(values)
        try:
            return tuple(next(it) if t in kinds else None for t in self.types)
        except StopIteration:
            raise BinlogFormatError(
                f"optional metadata has {len(values)} entries for more columns"
            ) from None

    def charsets(self) -> tuple[int | None, ...] | None:
        char = self._spread(self.character, self.default_cs, self.column_cs)
        es = self._spread(_ENUM_SET, self.es_default_cs, self.es_column_cs)
        if char is None and es is None:
            return None
        return tuple(
            (char[i] if char is not None else None)
            if t in self.character
            else (es[i] if es is not None else None)
            if t in _ENUM_SET
            else None
            for i, t in enumerate(self.types)
        )

    def _spread(
        self,
        kinds: frozenset[int],
        default: tuple[int, dict[int, int]] | None,
        column: list[int] | None,
    ) -> list[int | None] | None:
        idx = [i for i, t in enumerate(self.types) if t in kinds]
        out: list[int | None] = [None] * self.ncols
        if column is not None:
            if len(column) < len(idx):
                raise BinlogFormatError("COLUMN_CHARSET has fewer entries than columns")
            for i, cs in zip(idx, column, strict=False):
                out[i] = cs
            return out
        if default is not None:
            dflt, exceptions = default
            for n, i in enumerate(idx):
                out[i] = exceptions.get(n, dflt)
            return out
        return None


def _ints(v: memoryview) -> list[int]:
    out = []
    pos, end = 0, len(v)
    while pos < end:
        n, pos = read_packed_int(v, pos, end)
        out.append(n)
    return out


def _default_charset(v: memoryview) -> tuple[int, dict[int, int]]:
    # Default collation, then (index among character columns, collation) pairs for the
    # columns that differ (Table_map_log_event::init_charset_field).
    nums = _ints(v)
    if not nums:
        raise BinlogFormatError("empty DEFAULT_CHARSET field")
    return nums[0], dict(zip(nums[1::2], nums[2::2], strict=False))


def _strings(v: memoryview) -> list[str]:
    out = []
    pos, end = 0, len(v)
    while pos < end:
        n, pos = read_packed_int(v, pos, end)
        if pos + n > end:
            raise TruncatedError("string in optional metadata runs past its field")
        out.append(_text(v[pos : pos + n]))
        pos += n
    return out


def _string_lists(v: memoryview) -> list[tuple[str, ...]]:
    out = []
    pos, end = 0, len(v)
    while pos < end:
        count, pos = read_packed_int(v, pos, end)
        names = []
        for _ in range(count):
            n, pos = read_packed_int(v, pos, end)
            if pos + n > end:
                raise TruncatedError("ENUM/SET value runs past its field")
            names.append(_text(v[pos : pos + n]))
            pos += n
        out.append(tuple(names))
    return out
