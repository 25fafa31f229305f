"""Per-column code specs for the generated row decoders of :mod:`.codec`.

For each column type (the formats are tabled in :mod:`.codec`'s docstring) a spec says
either how to read it with ``struct`` (:class:`Fixed`: fixed width, combinable with its
fixed-width neighbours into one ``unpack_from``) or which lines of Python read it at ``p``
(:class:`Var`). :func:`column_plan` resolves, per column, what the spec depends on: signedness,
charset, ENUM/SET names, from the TABLE_MAP metadata first and the schema history second.
Nothing here runs per row; only the code it emits does.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from headwater.binlog import _temporal as tm
from headwater.binlog.charsets import BINARY_COLLATION, codec_for_charset, codec_for_collation
from headwater.binlog.constants import ColumnType
from headwater.binlog.jsonb import parse_json_diffs
from headwater.binlog.tablemap import TableMap
from headwater.errors import BinlogFormatError

__all__ = [
    "Col",
    "ColumnDef",
    "Fixed",
    "PartialJson",
    "Spec",
    "Var",
    "column_plan",
    "column_spec",
    "decimal_size",
    "json_diffs",
    "vector",
]

log = logging.getLogger(__name__)
_T = ColumnType


@dataclass(frozen=True, slots=True)
class ColumnDef:
    """A column as the schema history knows it, for TABLE_MAPs with MINIMAL metadata.

    ``charset`` is a MySQL charset or collation name (``utf8mb4``, ``latin1_swedish_ci``,
    ``binary``) or a Python codec name. TABLE_MAP metadata wins where both say something.
    """

    name: str
    unsigned: bool = False
    charset: str | None = None
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class PartialJson:
    """A JSON column of a PARTIAL_UPDATE_ROWS after image whose full value is unknown:
    the diffs (:class:`headwater.binlog.jsonb.JsonDiff`) to apply to the before value,
    kept when the before image lacks the column (binlog_row_image=MINIMAL)."""

    diffs: tuple[Any, ...]


# ---------------------------------------------------------------------------------------
# Per-column code specs


@dataclass(slots=True)
class Fixed:
    """A fixed-width column: struct ``fmt`` (byte order ``endian``, ``""`` if it has only
    ``s`` fields), and ``conv(target, temps)`` -> lines computing the value from the
    unpacked fields (``None`` when the single field is the value)."""

    endian: str
    fmt: str
    size: int
    nfields: int
    conv: Callable[[str, list[str]], list[str]] | None = None


@dataclass(slots=True)
class Var:
    """A variable-width column: ``code(target)`` -> lines reading at ``p`` and advancing."""

    code: Callable[[str], list[str]]


Spec = Fixed | Var

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_GROUP_FMT = {1: "B", 2: "H", 3: "HB", 4: "I"}


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of a NEWDECIMAL(precision, scale) value (``decimal_bin_size``)."""
    intg = precision - scale
    return intg // 9 * 4 + _DIG2BYTES[intg % 9] + scale // 9 * 4 + _DIG2BYTES[scale % 9]


def _decimal_spec(meta: int) -> Fixed:
    precision, scale = meta >> 8, meta & 0xFF
    if not 0 < precision <= 65 or scale > precision or scale > 30:
        raise BinlogFormatError(f"DECIMAL({precision},{scale}) is not a valid column type")
    intg = precision - scale
    # (bytes, digits, is_fraction), most significant first (bin2decimal in decimal.cc)
    groups: list[tuple[int, int, bool]] = []
    if intg % 9:
        groups.append((_DIG2BYTES[intg % 9], intg % 9, False))
    groups += [(4, 9, False)] * (intg // 9)
    groups += [(4, 9, True)] * (scale // 9)
    if scale % 9:
        groups.append((_DIG2BYTES[scale % 9], scale % 9, True))
    fmt = "".join(_GROUP_FMT[g[0]] for g in groups)

    def conv(target: str, temps: list[str]) -> list[str]:
        # Group values as expressions over the unpacked fields (3-byte groups use 2).
        exprs: list[str] = []
        i = 0
        for size, _, _ in groups:
            if size == 3:
                exprs.append(f"({temps[i]} << 8 | {temps[i + 1]})")
                i += 2
            else:
                exprs.append(temps[i])
                i += 1
        sign = 1 << (8 * groups[0][0] - 1)

        def value(negative: bool) -> str:
            # The unscaled integer: groups folded most significant first, each shifted by
            # its own digit count; then one exact scaleb (the context has 65 digits).
            unscaled = ""
            for n, ((size, digits, _), e) in enumerate(zip(groups, exprs, strict=True)):
                x = (1 << (8 * size)) - 1 if negative else 0
                if n == 0:
                    x ^= sign
                g = f"({e} ^ {x})" if x else e
                unscaled = g if not unscaled else f"({unscaled}) * {10**digits} + {g}"
            if negative:
                unscaled = f"-({unscaled})"
            return f"_D({unscaled})" if not scale else f"_scaleb(_D({unscaled}), {-scale})"

        return [
            f"if {exprs[0]} & {sign}:",
            f"    {target} = {value(False)}",
            "else:",
            f"    {target} = {value(True)}",
        ]

    return Fixed(">", fmt, decimal_size(precision, scale), len(fmt), conv)


def _frac(fsp: int) -> tuple[str, Callable[[list[str]], str]]:
    """Struct fields and the microseconds expression of a temporal fraction."""
    if fsp <= 0:
        return "", lambda t: "0"
    if fsp <= 2:
        return "B", lambda t: f"{t[0]} * 10000"
    if fsp <= 4:
        return "H", lambda t: f"{t[0]} * 100"
    return "HB", lambda t: f"({t[0]} << 8 | {t[1]})"


def _datetime2_spec(fsp: int) -> Fixed:
    ffmt, usec = _frac(fsp)

    def conv(target: str, t: list[str]) -> list[str]:
        us = usec(t[2:])
        return [
            f"_n = ({t[0]} << 32 | {t[1]}) - 0x8000000000",
            "_ymd = _n >> 17",
            "_ym = _ymd >> 5",
            "_hms = _n & 0x1FFFF",
            "try:",
            f"    {target} = _dt(_ym // 13, _ym % 13, _ymd & 31, _hms >> 12,"
            f" (_hms >> 6) & 63, _hms & 63, {us})",
            "except ValueError:",
            f"    {target} = _dt2_text(_n, {us}, {fsp})",
        ]

    return Fixed(">", "BI" + ffmt, 5 + (fsp + 1) // 2, 2 + len(ffmt), conv)


def _timestamp2_spec(fsp: int) -> Fixed:
    ffmt, usec = _frac(fsp)
    zero = tm.zero_timestamp(fsp)

    def conv(target: str, t: list[str]) -> list[str]:
        if not fsp:
            return [f"{target} = _fts({t[0]}, _UTC) if {t[0]} else {zero!r}"]
        # s + us / 1e6 is exact to the microsecond for every u32 s (float spacing below
        # 2**33 is < 1e-6 / 2), and fromtimestamp rounds to the nearest microsecond.
        us = usec(t[1:])
        return [
            f"_us = {us}",
            f"if {t[0]} or _us:",
            f"    {target} = _fts({t[0]} + _us / 1000000, _UTC)",
            "else:",
            f"    {target} = {zero!r}",
        ]

    return Fixed(">", "I" + ffmt, 4 + (fsp + 1) // 2, 1 + len(ffmt), conv)


def _time2_spec(fsp: int) -> Fixed:
    if fsp >= 5:
        # The whole 6-byte value is one number (integer part and microseconds).
        return Fixed(
            ">", "HI", 6, 2, lambda v, t: [f"{v} = _time2(({t[0]} << 32 | {t[1]}), 0, {fsp})"]
        )
    ffmt, _ = _frac(fsp)
    frac = {0: "0", 1: "t", 2: "t"}

    def conv(target: str, t: list[str]) -> list[str]:
        f = frac.get(len(ffmt), "0").replace("t", t[2]) if ffmt else "0"
        return [f"{target} = _time2(({t[0]} << 8 | {t[1]}), {f}, {fsp})"]

    return Fixed(">", "HB" + ffmt, 3 + (fsp + 1) // 2, 2 + len(ffmt), conv)


def _direct(fmt: str, size: int) -> Fixed:
    return Fixed("<", fmt, size, 1)


def _length_read(nbytes: int) -> str:
    """Expression for a little-endian length prefix of ``nbytes`` at ``p``."""
    if nbytes == 1:
        return "buf[p]"
    return {2: "_U16(buf, p)[0]", 3: "(_U16(buf, p)[0] | buf[p + 2] << 16)", 4: "_U32(buf, p)[0]"}[
        nbytes
    ]


def _prefixed(nbytes: int, wrap: str | None) -> Var:
    """Length-prefixed bytes, optionally passed through ``wrap`` (an expression template
    with ``{}`` for the bytes)."""
    if not 1 <= nbytes <= 4:
        raise BinlogFormatError(f"length prefix of {nbytes} bytes")

    def code(target: str) -> list[str]:
        data = f"buf[p + {nbytes}:p + {nbytes} + _n]"
        value = wrap.format(data) if wrap else data
        lines = [f"_n = {_length_read(nbytes)}"]
        if wrap and not wrap.startswith("{}"):
            # A parser (JSON, VECTOR) must not see a silently shortened slice.
            lines.append(f"if p + {nbytes} + _n > end: raise _Trunc('value runs past the end')")
        return [*lines, f"{target} = {value}", f"p += {nbytes} + _n"]

    return Var(code)


def _text_wrap(codec: str | None) -> str | None:
    if codec is None:
        return None
    return "{}.decode(" + repr(codec) + ", 'surrogateescape')"


# ---------------------------------------------------------------------------------------
# Column plan: what one column needs, resolved from the TABLE_MAP and the schema history


@dataclass(frozen=True, slots=True)
class Col:
    type: int
    meta: int
    unsigned: bool
    codec: str | None  # text codec; None = bytes
    enum_values: tuple[str, ...] | None
    set_values: tuple[str, ...] | None


def column_plan(tmap: TableMap, columns: Sequence[ColumnDef] | None) -> tuple[Col, ...]:
    n = tmap.column_count
    if columns is not None and len(columns) != n:
        log.warning(
            "schema history has %d columns for %s.%s, TABLE_MAP has %d; ignoring it",
            len(columns),
            tmap.schema,
            tmap.table,
            n,
        )
        columns = None
    cols = []
    for i, (t, meta) in enumerate(zip(tmap.column_types, tmap.column_meta, strict=True)):
        cdef = columns[i] if columns is not None else None
        unsigned = (
            tmap.signedness[i]
            if tmap.signedness is not None
            else cdef.unsigned
            if cdef is not None
            else False
        )
        collation = tmap.charsets[i] if tmap.charsets is not None else None
        codec: str | None
        if collation is not None:
            codec = None if collation == BINARY_COLLATION else codec_for_collation(collation)
        elif cdef is not None and cdef.charset is not None:
            codec = codec_for_charset(cdef.charset)
        elif t in (_T.BLOB, _T.TINY_BLOB, _T.MEDIUM_BLOB, _T.LONG_BLOB):
            codec = None
        else:
            codec = "utf-8"
        enum_values = (tmap.enum_values[i] if tmap.enum_values is not None else None) or (
            cdef.enum_values if cdef is not None else None
        )
        set_values = (tmap.set_values[i] if tmap.set_values is not None else None) or (
            cdef.set_values if cdef is not None else None
        )
        cols.append(Col(t, meta, unsigned, codec, enum_values, set_values))
    return tuple(cols)


def _string_length(meta: int) -> int:
    """Max byte length of a CHAR column from its metadata (Field_string quirk: bits 8-9 of
    the length are stored XORed into bits 4-5 of the real-type byte)."""
    b0, b1 = meta >> 8, meta & 0xFF
    if (b0 & 0x30) != 0x30:
        return b1 | (((b0 & 0x30) ^ 0x30) << 4)
    return b1


def column_spec(col: Col, k: int, env: dict[str, object], partial: bool = False) -> Spec:
    t, meta, u = col.type, col.meta, col.unsigned
    if t == _T.TINY:
        return _direct("B" if u else "b", 1)
    if t == _T.SHORT:
        return _direct("H" if u else "h", 2)
    if t == _T.INT24:
        if u:
            return Fixed("<", "HB", 3, 2, lambda v, x: [f"{v} = {x[0]} | {x[1]} << 16"])
        return Fixed("<", "Hb", 3, 2, lambda v, x: [f"{v} = {x[0]} + ({x[1]} << 16)"])
    if t == _T.LONG:
        return _direct("I" if u else "i", 4)
    if t == _T.LONGLONG:
        return _direct("Q" if u else "q", 8)
    if t == _T.FLOAT:
        return _direct("f", 4)
    if t == _T.DOUBLE:
        return _direct("d", 8)
    if t == _T.NEWDECIMAL:
        return _decimal_spec(meta)
    if t == _T.YEAR:
        return Fixed("<", "B", 1, 1, lambda v, x: [f"{v} = {x[0]} + 1900 if {x[0]} else 0"])
    if t in (_T.DATE, _T.NEWDATE):
        return Fixed("<", "HB", 3, 2, lambda v, x: [f"{v} = _date({x[0]} | {x[1]} << 16)"])
    if t == _T.TIME:
        return Fixed("<", "Hb", 3, 2, lambda v, x: [f"{v} = _time_old({x[0]} + ({x[1]} << 16))"])
    if t == _T.DATETIME:
        return Fixed("<", "Q", 8, 1, lambda v, x: [f"{v} = _dt_old({x[0]})"])
    if t == _T.TIMESTAMP:
        zero = tm.zero_timestamp(0)
        return Fixed(
            "<", "I", 4, 1, lambda v, x: [f"{v} = _fts({x[0]}, _UTC) if {x[0]} else {zero!r}"]
        )
    if t == _T.TIME2:
        return _time2_spec(meta)
    if t == _T.DATETIME2:
        return _datetime2_spec(meta)
    if t == _T.TIMESTAMP2:
        return _timestamp2_spec(meta)
    if t == _T.NULL:
        return Fixed("", "", 0, 0, lambda v, x: [f"{v} = None"])
    if t == _T.BIT:
        nbytes = (meta >> 8) + (1 if meta & 0xFF else 0)
        return Fixed(
            "", f"{nbytes}s", nbytes, 1, lambda v, x: [f"{v} = _from_bytes({x[0]}, 'big')"]
        )
    if t == _T.ENUM:
        size = meta & 0xFF
        if size not in (1, 2):
            raise BinlogFormatError(f"ENUM of {size} bytes")
        fmt = "B" if size == 1 else "H"
        if col.enum_values is None:
            return _direct(fmt, size)
        name = f"_enum{k}"
        env[name] = {i: s for i, s in enumerate(("", *col.enum_values))}
        return Fixed("<", fmt, size, 1, lambda v, x: [f"{v} = {name}.get({x[0]}, {x[0]})"])
    if t == _T.SET:
        size = meta & 0xFF
        if not 1 <= size <= 8:
            raise BinlogFormatError(f"SET of {size} bytes")
        if col.set_values is None:
            return Fixed(
                "", f"{size}s", size, 1, lambda v, x: [f"{v} = _from_bytes({x[0]}, 'little')"]
            )
        name = f"_set{k}"
        env[name] = _set_names(col.set_values)
        return Fixed(
            "", f"{size}s", size, 1, lambda v, x: [f"{v} = {name}(_from_bytes({x[0]}, 'little'))"]
        )
    if t == _T.STRING:
        length = _string_length(meta)
        return _prefixed(1 if length < 256 else 2, _text_wrap(col.codec))
    if t in (_T.VARCHAR, _T.VAR_STRING):
        return _prefixed(1 if meta < 256 else 2, _text_wrap(col.codec))
    if t in (_T.BLOB, _T.TINY_BLOB, _T.MEDIUM_BLOB, _T.LONG_BLOB):
        return _prefixed(meta, _text_wrap(col.codec))
    if t == _T.GEOMETRY:
        return _prefixed(meta, None)
    if t == _T.JSON:
        if partial:
            # A diff vector's length prefix is always 4 bytes (Json_diff_vector::write_binary).
            return _prefixed(4, "_json_diffs({})")
        return _prefixed(meta, "_json({})")
    if t == _T.VECTOR:
        return _prefixed(meta, "_vector({})")
    try:
        name = ColumnType(t).name
    except ValueError:
        name = str(t)
    raise BinlogFormatError(f"column type {name} cannot be decoded from row events")


def _set_names(names: tuple[str, ...]) -> Callable[[int], tuple[str, ...] | int]:
    @lru_cache(maxsize=256)
    def decode(mask: int) -> tuple[str, ...] | int:
        if mask >> len(names):
            return mask  # bits beyond the definition: not a value of this SET
        return tuple(n for i, n in enumerate(names) if mask >> i & 1)

    return decode


def vector(data: bytes) -> tuple[float, ...]:
    if len(data) % 4:
        raise BinlogFormatError(f"VECTOR value of {len(data)} bytes is not float32 aligned")
    return struct.unpack(f"<{len(data) // 4}f", data)


def json_diffs(data: bytes) -> PartialJson:
    # parse_json_diffs reads the 4-byte length itself: hand it the prefix too.
    diffs, _ = parse_json_diffs(len(data).to_bytes(4, "little") + data)
    return PartialJson(tuple(diffs))
