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
    "native_spec",
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
    """A variable-width column: ``code(target, off)`` -> lines reading at ``p + off`` (``off``
    a constant: the fixed-width bytes before it that ``p`` has not been advanced over) and
    leaving ``p`` after the value."""

    code: Callable[[str, int], list[str]]


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

    # Weight of each group in the unscaled integer (its digits times those of the groups
    # after it), and the sign bit of the first group.
    weights = [10 ** sum(g[1] for g in groups[n + 1 :]) for n in range(len(groups))]
    sign = 1 << (8 * groups[0][0] - 1)
    # S = sum(raw group * weight). Positive values store the first group with the sign
    # bit set: value = S - sign * w0. Negative values store every byte inverted, i.e. each
    # group as mask - digits (the first group's mask without the sign bit):
    # value = -(sum(mask * w) - S) = S - sum(mask * w). One constant either way.
    positive = sign * weights[0]
    negative = (sign - 1) * weights[0] + sum(
        ((1 << (8 * size)) - 1) * w for (size, _, _), w in zip(groups[1:], weights[1:], strict=True)
    )

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
        # Folded most significant first, each group shifted by its own digit count.
        unscaled = exprs[0]
        for (_, digits, _), e in zip(groups[1:], exprs[1:], strict=True):
            unscaled = f"({unscaled}) * {10**digits} + {e}"
        value = f"_D({unscaled} - ({positive} if {exprs[0]} & {sign} else {negative}))"
        # _E<scale> is Decimal(-scale): scaleb converts an int exponent on every call.
        return [f"{target} = {value}" if not scale else f"{target} = _scaleb({value}, _E{scale})"]

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
    # The 40-bit integer part n is biased by 2**39, a multiple of 2**17: the date bits are
    # (n >> 17) - 2**22 and the time bits need no unbiasing.
    # n is ``x >> shift``; the shifts are folded into the constants.
    def convert(target: str, x: str, shift: int, us: str, setup: list[str]) -> list[str]:
        def bits(low: int) -> str:
            return f"({x} >> {low + shift})" if low + shift else x

        n = bits(0)
        return [
            *setup,
            f"_ymd = {bits(17)} - 0x400000",
            "_ym = _ymd >> 5",
            "try:",
            f"    {target} = _dt(_ym // 13, _ym % 13, _ymd & 31, {bits(12)} & 31,"
            f" {bits(6)} & 63, {n} & 63, {us})",
            "except ValueError:",
            f"    {target} = _dt2_text({n} - 0x8000000000, {us}, {fsp})",
        ]

    if fsp >= 5:
        # Integer part and microseconds fill one big-endian u64.
        def conv_u64(target: str, t: list[str]) -> list[str]:
            return convert(target, t[0], 24, f"{t[0]} & 0xFFFFFF", [])

        return Fixed(">", "Q", 8, 1, conv_u64)
    ffmt, usec = _frac(fsp)

    def conv(target: str, t: list[str]) -> list[str]:
        return convert(target, "_n", 0, usec(t[2:]), [f"_n = {t[0]} << 32 | {t[1]}"])

    return Fixed(">", "BI" + ffmt, 5 + (fsp + 1) // 2, 2 + len(ffmt), conv)


def _timestamp2_spec(fsp: int) -> Fixed:
    ffmt, _ = _frac(fsp)
    zero = tm.zero_timestamp(fsp)
    # Seconds per fraction unit: 1/100 (fsp 1-2), 1/10000 (3-4), 1/1000000 (5-6).
    per_second = 10 ** ((fsp + 1) // 2 * 2)

    def conv(target: str, t: list[str]) -> list[str]:
        if not fsp:
            return [f"{target} = _fts({t[0]}, _UTC) if {t[0]} else {zero!r}"]
        setup = [] if fsp <= 4 else [f"_f = {t[1]} << 8 | {t[2]}"]
        frac = t[1] if fsp <= 4 else "_f"
        # s + frac / per_second is exact to the microsecond for every u32 s (float spacing
        # below 2**33 is < 1e-6 / 2, and the quotient is the correctly rounded value of
        # frac * 10**k / 1000000), and fromtimestamp rounds to the nearest microsecond.
        # A whole second takes the cheaper int path (same value).
        return [
            *setup,
            f"if {frac}:",
            f"    {target} = _fts({t[0]} + {frac} / {per_second}, _UTC)",
            f"elif {t[0]}:",
            f"    {target} = _fts({t[0]}, _UTC)",
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


def _length_read(nbytes: int, off: int) -> str:
    """Expression for a little-endian length prefix of ``nbytes`` at ``p + off``."""
    at = f"p + {off}" if off else "p"
    if nbytes == 1:
        return f"buf[{at}]"
    return {
        2: f"_U16(buf, {at})[0]",
        3: f"(_U16(buf, {at})[0] | buf[p + {off + 2}] << 16)",
        4: f"_U32(buf, {at})[0]",
    }[nbytes]


def _prefixed(nbytes: int, wrap: str | None) -> Var:
    """Length-prefixed bytes, optionally passed through ``wrap`` (an expression template
    with ``{}`` for the bytes)."""
    if not 1 <= nbytes <= 4:
        raise BinlogFormatError(f"length prefix of {nbytes} bytes")

    def code(target: str, off: int) -> list[str]:
        # p moves past the value first: the value is then buf[p - _n:p].
        data = "buf[p - _n:p]"
        value = wrap.format(data) if wrap else data
        lines = [f"_n = {_length_read(nbytes, off)}", f"p += {off + nbytes} + _n"]
        if wrap and not wrap.startswith("{}"):
            # A parser (JSON, VECTOR) must not see a silently shortened slice.
            lines.append("if p > end: raise _Trunc('value runs past the end')")
        return [*lines, f"{target} = {value}"]

    return Var(code)


def _text(nbytes: int, codec: str | None) -> Var:
    """Length-prefixed text in ``codec`` (``None``: bytes)."""
    if codec is None:
        return _prefixed(nbytes, None)
    if not 1 <= nbytes <= 4:
        raise BinlogFormatError(f"length prefix of {nbytes} bytes")
    # A strict decode is cheaper than one with an error handler, and gives the same str
    # when it succeeds; only undecodable bytes take the surrogateescape path.
    strict = ".decode()" if codec == "utf-8" else f".decode({codec!r})"

    def code(target: str, off: int) -> list[str]:
        return [
            f"_n = {_length_read(nbytes, off)}",
            f"p += {off + nbytes} + _n",
            "try:",
            f"    {target} = buf[p - _n:p]{strict}",
            "except UnicodeDecodeError:",
            f"    {target} = buf[p - _n:p].decode({codec!r}, 'surrogateescape')",
        ]

    return Var(code)


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
        if col.codec is None:
            # BINARY(n): Field_string::pack (sql/field.cc, MySQL and MariaDB) drops trailing
            # pad characters of single-byte charsets, and binary's pad is 0x00, so
            # x'61620000' is logged as 'ab'; the column holds n bytes: pad them back.
            return _prefixed(1 if length < 256 else 2, f"{{}}.ljust({length}, b'\\x00')")
        return _text(1 if length < 256 else 2, col.codec)
    if t in (_T.VARCHAR, _T.VAR_STRING):
        return _text(1 if meta < 256 else 2, col.codec)
    if t in (_T.BLOB, _T.TINY_BLOB, _T.MEDIUM_BLOB, _T.LONG_BLOB):
        return _text(meta, col.codec)
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


def value_width(col: Col) -> int:
    """Bytes a non-NULL value of ``col`` takes in a row image: ``n >= 0`` for a fixed
    width, ``-k`` for a value after a ``k``-byte little-endian length (row counting walks
    images with this and decodes nothing)."""
    t, meta = col.type, col.meta
    if t == _T.STRING:
        return -1 if _string_length(meta) < 256 else -2
    if t in (_T.VARCHAR, _T.VAR_STRING):
        return -1 if meta < 256 else -2
    if t in (_T.BLOB, _T.TINY_BLOB, _T.MEDIUM_BLOB, _T.LONG_BLOB, _T.GEOMETRY, _T.JSON, _T.VECTOR):
        if not 1 <= meta <= 4:
            raise BinlogFormatError(f"length prefix of {meta} bytes")
        return -meta
    spec = column_spec(col, 0, {})
    assert isinstance(spec, Fixed)
    return spec.size


#: One column of a compiled image (headwater._native._rowimage.Image): kind name, two
#: integer parameters, names or a charmap table.
NativeSpec = tuple[str, int, int, object]

_NATIVE_INTS: dict[int, str] = {
    _T.TINY: "8",
    _T.SHORT: "16",
    _T.INT24: "24",
    _T.LONG: "32",
    _T.LONGLONG: "64",
}
_NATIVE_FIXED: dict[int, str] = {
    _T.FLOAT: "float",
    _T.DOUBLE: "double",
    _T.YEAR: "year",
    _T.DATE: "date",
    _T.NEWDATE: "date",
    _T.TIMESTAMP: "timestamp",
}
_NATIVE_FSP: dict[int, str] = {
    _T.DATETIME2: "datetime2",
    _T.TIMESTAMP2: "timestamp2",
    _T.TIME2: "time2",
}
_BLOBS = (_T.BLOB, _T.TINY_BLOB, _T.MEDIUM_BLOB, _T.LONG_BLOB)


@lru_cache(maxsize=1)
def _mysql_latin1() -> str:
    # The registered codec's own table (charsets.py): byte b -> character b of this text.
    return bytes(range(256)).decode("mysql-latin1")


def _native_text(prefix: int, codec: str | None) -> NativeSpec | None:
    if codec is None:
        return ("bytes", prefix, 0, None)
    if codec == "utf-8":
        return ("utf8", prefix, 0, None)
    if codec == "ascii":
        return ("ascii", prefix, 0, None)
    if codec == "iso8859-1":
        return ("latin1", prefix, 0, None)
    if codec == "mysql-latin1":
        return ("charmap", prefix, 0, _mysql_latin1())
    return None  # other charsets: the generated Python decoder


def native_spec(col: Col) -> NativeSpec | None:
    """How the compiled row decoder reads ``col`` (the same values as :func:`column_spec`'s
    code), or None when it does not: MySQL binary JSON, VECTOR, the NULL type, the pre-5.6
    TIME and DATETIME, charsets other than UTF-8, ASCII and latin1, BIT over 64 bits, and
    metadata :func:`column_spec` refuses (the Python path raises its error)."""
    t, meta = col.type, col.meta
    if t in _NATIVE_INTS:
        return (("u" if col.unsigned else "i") + _NATIVE_INTS[t], 0, 0, None)
    if t in _NATIVE_FIXED:
        return (_NATIVE_FIXED[t], 0, 0, None)
    if t in _NATIVE_FSP:
        return (_NATIVE_FSP[t], meta, 0, None) if 0 <= meta <= 6 else None
    if t == _T.NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        valid = 0 < precision <= 65 and scale <= precision and scale <= 30
        return ("decimal", precision, scale, None) if valid else None
    if t == _T.BIT:
        nbytes = (meta >> 8) + (1 if meta & 0xFF else 0)
        return ("bit", nbytes, 0, None) if nbytes <= 8 else None
    if t == _T.ENUM:
        size = meta & 0xFF
        return ("enum", size, 0, col.enum_values) if size in (1, 2) else None
    if t == _T.SET:
        size = meta & 0xFF
        return ("set", size, 0, col.set_values) if 1 <= size <= 8 else None
    if t == _T.STRING:
        length = _string_length(meta)
        prefix = 1 if length < 256 else 2
        if col.codec is None:
            return ("binary", prefix, length, None)
        return _native_text(prefix, col.codec)
    if t in (_T.VARCHAR, _T.VAR_STRING):
        return _native_text(1 if meta < 256 else 2, col.codec)
    if t in _BLOBS:
        return _native_text(meta, col.codec) if 1 <= meta <= 4 else None
    if t == _T.GEOMETRY:
        return ("bytes", meta, 0, None) if 1 <= meta <= 4 else None
    return None


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
