"""Column values of row images, decoded by straight-line code generated per table shape.

A row image (MySQL ``sql/rpl_record.cc``, ``pack_row``) is::

    null_bits   ceil(N / 8) bytes, N = columns present in the image; bit k (LSB first) set =
                the k-th present column is NULL (and takes no bytes below)
    values      the non-NULL present columns in column order, each as ``Field::pack`` writes
                it (formats below; the per-type metadata is decoded by :mod:`.tablemap`)

================  =================================================================
TINY..LONGLONG    1, 2, 3, 4, 8 bytes LE, two's complement or unsigned
FLOAT, DOUBLE     IEEE 754 LE, 4 / 8 bytes
NEWDECIMAL        ``bin2decimal`` (strings/decimal.cc): big-endian groups of 9 digits in
                  4 bytes, the leading/trailing partial groups in 1-4 bytes
                  (dig2bytes); the top bit of the first byte is set for positive
                  values, negative values store every byte inverted
BIT               ``bytes + (bits > 0)`` bytes, big endian
YEAR              1 byte, 0 or year - 1900
DATE/TIME/...     see :mod:`._temporal`
CHAR (STRING)     length 1 byte (2 if max length > 255) + bytes; the max length's
                  high bits live in the real-type byte of the metadata
                  (``Field_string::do_save_field_metadata``)
VARCHAR           length 1 byte (2 if max length > 255) + bytes
BLOB/TEXT/GEOMETRY/JSON/VECTOR   length in ``meta`` (1-4) bytes LE + bytes
ENUM              1 or 2 bytes LE: 1-based index (0 = the '' error value)
SET               1-8 bytes LE bitmask
================  =================================================================

Python values follow the conventions table of :mod:`headwater.binlog`. Choices this module
makes where the binlog alone does not decide:

* Without TABLE_MAP charsets and without a :class:`ColumnDef` charset, CHAR/VARCHAR decode
  as UTF-8 (``str``) and the BLOB family stays ``bytes``; ENUM/SET without value names give
  the index / bitmask; integers without signedness are signed.
* Text is decoded with ``errors="surrogateescape"``: bytes that are invalid in the column's
  charset never fail the row and can be recovered with
  ``s.encode(codec, "surrogateescape")``.
* CHAR values come without trailing spaces (the server strips them when packing);
  BINARY(n) values keep their 0x00 padding.
* Corrupt bytes that still frame (a DECIMAL group above 999999999, an out-of-range date)
  give the out-of-range value or its text, never an exception.

Speed: :class:`RowDecoder` generates, per set of present columns, Python source that reads a
whole rows-event body in one function: precompiled ``struct.Struct.unpack_from`` per run of
adjacent fixed-width columns when the row has no NULL (the common case), per column when it
has, no per-column dispatch, then compiles it once (cached by shape, see
:func:`row_decoder_for`). Reads past the end surface as ``IndexError``/``struct.error``
inside the generated code and are turned into :class:`TruncatedError` here.
"""

from __future__ import annotations

import logging
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Context, Decimal
from functools import lru_cache
from typing import Any

from headwater.binlog import _temporal as tm
from headwater.binlog.charsets import BINARY_COLLATION, codec_for_charset, codec_for_collation
from headwater.binlog.constants import ColumnType
from headwater.binlog.jsonb import decode_json, parse_json_diffs
from headwater.binlog.tablemap import TableMap
from headwater.errors import BinlogFormatError, TruncatedError

__all__ = ["ColumnDef", "PartialJson", "RowDecoder", "decimal_size", "row_decoder_for"]

log = logging.getLogger(__name__)
_T = ColumnType

#: Errors the generated code raises on short or garbled input; translated at the boundary.
DECODE_ERRORS = (IndexError, struct.error, ValueError, OverflowError, TypeError)


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
class _Fixed:
    """A fixed-width column: struct ``fmt`` (byte order ``endian``, ``""`` if it has only
    ``s`` fields), and ``conv(target, temps)`` -> lines computing the value from the
    unpacked fields (``None`` when the single field is the value)."""

    endian: str
    fmt: str
    size: int
    nfields: int
    conv: Callable[[str, list[str]], list[str]] | None = None


@dataclass(slots=True)
class _Var:
    """A variable-width column: ``code(target)`` -> lines reading at ``p`` and advancing."""

    code: Callable[[str], list[str]]


_Spec = _Fixed | _Var

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_GROUP_FMT = {1: "B", 2: "H", 3: "HB", 4: "I"}


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of a NEWDECIMAL(precision, scale) value (``decimal_bin_size``)."""
    intg = precision - scale
    return intg // 9 * 4 + _DIG2BYTES[intg % 9] + scale // 9 * 4 + _DIG2BYTES[scale % 9]


def _decimal_spec(meta: int) -> _Fixed:
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

    return _Fixed(">", fmt, decimal_size(precision, scale), len(fmt), conv)


def _frac(fsp: int) -> tuple[str, Callable[[list[str]], str]]:
    """Struct fields and the microseconds expression of a temporal fraction."""
    if fsp <= 0:
        return "", lambda t: "0"
    if fsp <= 2:
        return "B", lambda t: f"{t[0]} * 10000"
    if fsp <= 4:
        return "H", lambda t: f"{t[0]} * 100"
    return "HB", lambda t: f"({t[0]} << 8 | {t[1]})"


def _datetime2_spec(fsp: int) -> _Fixed:
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

    return _Fixed(">", "BI" + ffmt, 5 + (fsp + 1) // 2, 2 + len(ffmt), conv)


def _timestamp2_spec(fsp: int) -> _Fixed:
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

    return _Fixed(">", "I" + ffmt, 4 + (fsp + 1) // 2, 1 + len(ffmt), conv)


def _time2_spec(fsp: int) -> _Fixed:
    if fsp >= 5:
        # The whole 6-byte value is one number (integer part and microseconds).
        return _Fixed(
            ">", "HI", 6, 2, lambda v, t: [f"{v} = _time2(({t[0]} << 32 | {t[1]}), 0, {fsp})"]
        )
    ffmt, _ = _frac(fsp)
    frac = {0: "0", 1: "t", 2: "t"}

    def conv(target: str, t: list[str]) -> list[str]:
        f = frac.get(len(ffmt), "0").replace("t", t[2]) if ffmt else "0"
        return [f"{target} = _time2(({t[0]} << 8 | {t[1]}), {f}, {fsp})"]

    return _Fixed(">", "HB" + ffmt, 3 + (fsp + 1) // 2, 2 + len(ffmt), conv)


def _direct(fmt: str, size: int) -> _Fixed:
    return _Fixed("<", fmt, size, 1)


def _length_read(nbytes: int) -> str:
    """Expression for a little-endian length prefix of ``nbytes`` at ``p``."""
    if nbytes == 1:
        return "buf[p]"
    return {2: "_U16(buf, p)[0]", 3: "(_U16(buf, p)[0] | buf[p + 2] << 16)", 4: "_U32(buf, p)[0]"}[
        nbytes
    ]


def _prefixed(nbytes: int, wrap: str | None) -> _Var:
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

    return _Var(code)


def _text_wrap(codec: str | None) -> str | None:
    if codec is None:
        return None
    return "{}.decode(" + repr(codec) + ", 'surrogateescape')"


# ---------------------------------------------------------------------------------------
# Column plan: what one column needs, resolved from the TABLE_MAP and the schema history


@dataclass(frozen=True, slots=True)
class _Col:
    type: int
    meta: int
    unsigned: bool
    codec: str | None  # text codec; None = bytes
    enum_values: tuple[str, ...] | None
    set_values: tuple[str, ...] | None


def _plan(tmap: TableMap, columns: Sequence[ColumnDef] | None) -> tuple[_Col, ...]:
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
        cols.append(_Col(t, meta, unsigned, codec, enum_values, set_values))
    return tuple(cols)


def _string_length(meta: int) -> int:
    """Max byte length of a CHAR column from its metadata (Field_string quirk: bits 8-9 of
    the length are stored XORed into bits 4-5 of the real-type byte)."""
    b0, b1 = meta >> 8, meta & 0xFF
    if (b0 & 0x30) != 0x30:
        return b1 | (((b0 & 0x30) ^ 0x30) << 4)
    return b1


def _spec(col: _Col, k: int, env: dict[str, object], partial: bool = False) -> _Spec:
    t, meta, u = col.type, col.meta, col.unsigned
    if t == _T.TINY:
        return _direct("B" if u else "b", 1)
    if t == _T.SHORT:
        return _direct("H" if u else "h", 2)
    if t == _T.INT24:
        if u:
            return _Fixed("<", "HB", 3, 2, lambda v, x: [f"{v} = {x[0]} | {x[1]} << 16"])
        return _Fixed("<", "Hb", 3, 2, lambda v, x: [f"{v} = {x[0]} + ({x[1]} << 16)"])
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
        return _Fixed("<", "B", 1, 1, lambda v, x: [f"{v} = {x[0]} + 1900 if {x[0]} else 0"])
    if t in (_T.DATE, _T.NEWDATE):
        return _Fixed("<", "HB", 3, 2, lambda v, x: [f"{v} = _date({x[0]} | {x[1]} << 16)"])
    if t == _T.TIME:
        return _Fixed("<", "Hb", 3, 2, lambda v, x: [f"{v} = _time_old({x[0]} + ({x[1]} << 16))"])
    if t == _T.DATETIME:
        return _Fixed("<", "Q", 8, 1, lambda v, x: [f"{v} = _dt_old({x[0]})"])
    if t == _T.TIMESTAMP:
        zero = tm.zero_timestamp(0)
        return _Fixed(
            "<", "I", 4, 1, lambda v, x: [f"{v} = _fts({x[0]}, _UTC) if {x[0]} else {zero!r}"]
        )
    if t == _T.TIME2:
        return _time2_spec(meta)
    if t == _T.DATETIME2:
        return _datetime2_spec(meta)
    if t == _T.TIMESTAMP2:
        return _timestamp2_spec(meta)
    if t == _T.NULL:
        return _Fixed("", "", 0, 0, lambda v, x: [f"{v} = None"])
    if t == _T.BIT:
        nbytes = (meta >> 8) + (1 if meta & 0xFF else 0)
        return _Fixed(
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
        return _Fixed("<", fmt, size, 1, lambda v, x: [f"{v} = {name}.get({x[0]}, {x[0]})"])
    if t == _T.SET:
        size = meta & 0xFF
        if not 1 <= size <= 8:
            raise BinlogFormatError(f"SET of {size} bytes")
        if col.set_values is None:
            return _Fixed(
                "", f"{size}s", size, 1, lambda v, x: [f"{v} = _from_bytes({x[0]}, 'little')"]
            )
        name = f"_set{k}"
        env[name] = _set_names(col.set_values)
        return _Fixed(
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


def _vector(data: bytes) -> tuple[float, ...]:
    if len(data) % 4:
        raise BinlogFormatError(f"VECTOR value of {len(data)} bytes is not float32 aligned")
    return struct.unpack(f"<{len(data) // 4}f", data)


def _json_diffs(data: bytes) -> PartialJson:
    # parse_json_diffs reads the 4-byte length itself: hand it the prefix too.
    diffs, _ = parse_json_diffs(len(data).to_bytes(4, "little") + data)
    return PartialJson(tuple(diffs))


# ---------------------------------------------------------------------------------------
# Code generation

_ENV_BASE: dict[str, object] = {
    "_D": Decimal,
    # DECIMAL has at most 65 digits: scaleb in a 65-digit context never rounds.
    "_scaleb": Context(prec=65).scaleb,
    "_dt": datetime,
    "_fts": datetime.fromtimestamp,
    "_UTC": tm.UTC,
    "_date": tm.date_from_packed,
    "_time_old": tm.time_from_old,
    "_dt_old": tm.datetime_from_old,
    "_time2": tm.time2_from_parts,
    "_dt2_text": tm.datetime2_text,
    "_from_bytes": int.from_bytes,
    "_U16": struct.Struct("<H").unpack_from,
    "_U32": struct.Struct("<I").unpack_from,
    "_json": decode_json,
    "_json_diffs": _json_diffs,
    "_vector": _vector,
    "_Trunc": TruncatedError,
}


class _Gen:
    """Builds the source of one generated module; ``env`` collects its globals."""

    def __init__(self, plan: tuple[_Col, ...]) -> None:
        self.plan = plan
        self.env: dict[str, object] = dict(_ENV_BASE)
        self.structs: dict[str, str] = {}

    def _struct(self, fmt: str) -> str:
        name = self.structs.get(fmt)
        if name is None:
            name = self.structs[fmt] = f"_S{len(self.structs)}"
            self.env[name] = struct.Struct(fmt).unpack_from
        return name

    def image(self, present: Sequence[int], prefix: str, partial: int = 0) -> list[str]:
        """Lines decoding one image at ``p`` into ``{prefix}0..{prefix}N-1``."""
        specs: list[tuple[str, _Spec]] = []
        json_ordinal = {
            i: n for n, i in enumerate(j for j, c in enumerate(self.plan) if c.type == _T.JSON)
        }
        for j, i in enumerate(present):
            col = self.plan[i]
            is_partial = col.type == _T.JSON and bool(partial >> json_ordinal[i] & 1)
            specs.append((f"{prefix}{j}", _spec(col, i, self.env, is_partial)))
        n = len(present)
        if n == 0:
            return []
        nb = (n + 7) // 8
        lines = [
            "_nb = buf[p]" if nb == 1 else f"_nb = _from_bytes(buf[p:p + {nb}], 'little')",
            f"p += {nb}",
            "if not _nb:",
        ]
        lines += _indent(self._fast(specs, prefix))
        lines.append("else:")
        slow: list[str] = []
        for j, (var, spec) in enumerate(specs):
            slow += [f"if _nb & {1 << j}:", f"    {var} = None", "else:"]
            slow += _indent(
                self._run([(var, spec)], f"{prefix}{j}_")
                if isinstance(spec, _Fixed)
                else spec.code(var)
            )
        lines += _indent(slow)
        return lines

    def _fast(self, specs: list[tuple[str, _Spec]], prefix: str) -> list[str]:
        lines: list[str] = []
        run: list[tuple[str, _Spec]] = []
        endian = ""
        for var, spec in specs:
            if isinstance(spec, _Fixed) and (
                not spec.endian or not endian or spec.endian == endian
            ):
                run.append((var, spec))
                endian = endian or spec.endian
                continue
            if run:
                lines += self._run(run, f"{prefix}r{len(lines)}_")
                run, endian = [], ""
            if isinstance(spec, _Fixed):
                run, endian = [(var, spec)], spec.endian
            else:
                lines += spec.code(var)
        if run:
            lines += self._run(run, f"{prefix}r{len(lines)}_")
        return lines

    def _run(self, run: list[tuple[str, _Spec]], tmp: str) -> list[str]:
        """One struct read for adjacent fixed-width columns, then their conversions."""
        fmt = "".join(s.fmt for _, s in run if isinstance(s, _Fixed))
        endian = next((s.endian for _, s in run if isinstance(s, _Fixed) and s.endian), "<")
        size = sum(s.size for _, s in run if isinstance(s, _Fixed))
        targets: list[str] = []
        convs: list[str] = []
        for n, (var, spec) in enumerate(run):
            assert isinstance(spec, _Fixed)
            if spec.conv is None:
                targets.append(var)
                continue
            temps = [f"_{tmp}{n}_{i}" for i in range(spec.nfields)]
            targets += temps
            convs += spec.conv(var, temps)
        lines = []
        if targets:
            lines.append(f"{', '.join(targets)}, = {self._struct(endian + fmt)}(buf, p)")
        if size:
            lines.append(f"p += {size}")
        return lines + convs

    def compile(self, name: str, lines: list[str]) -> Callable[..., Any]:
        source = "\n".join(lines) + "\n"
        code = compile(source, f"<headwater row decoder {name}>", "exec")
        namespace = dict(self.env)
        exec(code, namespace)
        fn: Callable[..., Any] = namespace[name]  # type: ignore[assignment]
        fn.__source__ = source  # type: ignore[attr-defined]
        return fn


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines] or ["    pass"]


def _values(prefix: str, n: int) -> str:
    return "(" + "".join(f"{prefix}{j}, " for j in range(n)) + ")"


class RowDecoder:
    """Decodes the row images of one table shape; generated code is cached per image shape.

    ``present`` arguments are the column indexes in the image, ascending (from the
    columns-present bitmaps of the rows event). Methods raise :class:`TruncatedError` when
    the bytes end inside a row and :class:`BinlogFormatError` on bytes that do not decode.
    """

    def __init__(self, table_map: TableMap, columns: Sequence[ColumnDef] | None = None) -> None:
        self.table_map = table_map
        self.plan = _plan(table_map, columns)
        self._image: dict[tuple[tuple[int, ...], int], Callable[..., Any]] = {}
        self._rows: dict[tuple[int, ...], Callable[..., Any]] = {}
        self._pairs: dict[tuple[tuple[int, ...], tuple[int, ...]], Callable[..., Any]] = {}

    def source(self, present: Sequence[int]) -> str:
        """The generated source of :meth:`decode_rows` for ``present`` (for debugging)."""
        return str(self._rows_fn(tuple(present)).__source__)  # type: ignore[attr-defined]

    def _image_fn(self, present: tuple[int, ...], partial: int) -> Callable[..., Any]:
        fn = self._image.get((present, partial))
        if fn is None:
            gen = _Gen(self.plan)
            lines = ["def image(buf, p, end):"]
            lines += _indent(gen.image(present, "v", partial))
            lines.append(f"    return {_values('v', len(present))}, p")
            fn = self._image[(present, partial)] = gen.compile("image", lines)
        return fn

    def _rows_fn(self, present: tuple[int, ...]) -> Callable[..., Any]:
        fn = self._rows.get(present)
        if fn is None:
            gen = _Gen(self.plan)
            lines = [
                "def rows(buf, p, end):",
                "    out = []",
                "    append = out.append",
                "    while p < end:",
            ]
            lines += _indent(_indent(gen.image(present, "v")))
            lines += [
                f"        append({_values('v', len(present))})",
                "    if p > end:",
                "        raise _Trunc('row image runs past the end of the event')",
                "    return out",
            ]
            fn = self._rows[present] = gen.compile("rows", lines)
        return fn

    def _pairs_fn(self, before: tuple[int, ...], after: tuple[int, ...]) -> Callable[..., Any]:
        fn = self._pairs.get((before, after))
        if fn is None:
            gen = _Gen(self.plan)
            lines = [
                "def pairs(buf, p, end):",
                "    out = []",
                "    append = out.append",
                "    while p < end:",
            ]
            lines += _indent(_indent(gen.image(before, "b")))
            lines += _indent(_indent(gen.image(after, "a")))
            lines += [
                f"        append(({_values('b', len(before))}, {_values('a', len(after))}))",
                "    if p > end:",
                "        raise _Trunc('row image runs past the end of the event')",
                "    return out",
            ]
            fn = self._pairs[(before, after)] = gen.compile("pairs", lines)
        return fn

    def decode_image(
        self,
        buf: bytes,
        pos: int,
        present: Sequence[int] | None = None,
        *,
        partial_json: int = 0,
    ) -> tuple[tuple[object, ...], int]:
        """One image at ``pos`` -> (values of the present columns, position after it).

        ``present=None`` means every column. ``partial_json`` is the partial_bits of a
        PARTIAL_UPDATE_ROWS after image (bit n = the n-th JSON column of the table holds a
        diff vector, decoded to :class:`PartialJson`).
        """
        cols = tuple(range(len(self.plan))) if present is None else tuple(present)
        fn = self._image_fn(cols, partial_json)
        try:
            values, end = fn(buf, pos, len(buf))
        except DECODE_ERRORS as exc:
            raise _translate(exc) from None
        if end > len(buf):
            raise TruncatedError("row image runs past the end of the event")
        return values, end

    def decode_rows(
        self, buf: bytes, pos: int, end: int, present: Sequence[int]
    ) -> list[tuple[object, ...]]:
        """Every image in ``buf[pos:end]`` (WRITE_ROWS / DELETE_ROWS)."""
        if not present:
            raise BinlogFormatError("rows event with no columns in its images")
        try:
            return self._rows_fn(tuple(present))(buf, pos, end)  # type: ignore[no-any-return]
        except DECODE_ERRORS as exc:
            raise _translate(exc) from None

    def decode_row_pairs(
        self, buf: bytes, pos: int, end: int, before: Sequence[int], after: Sequence[int]
    ) -> list[tuple[tuple[object, ...], tuple[object, ...]]]:
        """Every (before, after) pair of images in ``buf[pos:end]`` (UPDATE_ROWS)."""
        if not before and not after:
            raise BinlogFormatError("rows event with no columns in its images")
        try:
            fn = self._pairs_fn(tuple(before), tuple(after))
            return fn(buf, pos, end)  # type: ignore[no-any-return]
        except DECODE_ERRORS as exc:
            raise _translate(exc) from None


def _translate(exc: Exception) -> BinlogFormatError:
    if isinstance(exc, IndexError | struct.error):
        return TruncatedError(f"row image runs past the end of the event ({exc})")
    return BinlogFormatError(f"row value does not decode: {exc}")


_DECODERS: OrderedDict[tuple[object, ...], RowDecoder] = OrderedDict()
_DECODERS_MAX = 1024


def row_decoder_for(table_map: TableMap, columns: Sequence[ColumnDef] | None = None) -> RowDecoder:
    """The :class:`RowDecoder` for this table shape, built once and kept (LRU, 1024)."""
    key = (table_map.shape_key(), None if columns is None else tuple(columns))
    dec = _DECODERS.get(key)
    if dec is None:
        dec = RowDecoder(table_map, columns)
        _DECODERS[key] = dec
        if len(_DECODERS) > _DECODERS_MAX:
            _DECODERS.popitem(last=False)
    else:
        _DECODERS.move_to_end(key)
    return dec
