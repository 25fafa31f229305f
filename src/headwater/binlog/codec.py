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
* CHAR values come without trailing spaces (the server strips them when packing, and
  reads CHAR without them); BINARY(n) values, whose trailing 0x00 bytes the server strips
  the same way, are padded back to their n bytes (what the column holds and returns).
* Corrupt bytes that still frame (a DECIMAL group above 999999999, an out-of-range date)
  give the out-of-range value or its text, never an exception.

Per-type code specs and the column plan live in :mod:`._columns`; this module holds the
code generator and :class:`RowDecoder`.

Speed: :class:`RowDecoder` generates, per set of present columns, Python source that reads a
whole rows-event body in one function: precompiled ``struct.Struct.unpack_from`` per run of
adjacent fixed-width columns when the row has no NULL (the common case), per column when it
has, no per-column dispatch, then compiles it once (cached by shape, see
:func:`row_decoder_for`). In the no-NULL path fixed-width reads are at constant offsets from
``p``, which only variable-width columns advance (``p += off + n``, value ``buf[p - n:p]``).
Text is decoded strictly first (cheaper), with ``surrogateescape`` only when that fails.
Reads past the end surface as ``IndexError``/``struct.error`` inside the generated code and
are turned into :class:`TruncatedError` here.

Compiled fast path: when every column of an image has a reader in the C extension
(``headwater._native._rowimage``, ``src/headwater/_native/rowimage.c``; which columns:
:func:`._columns.native_spec` -- integers, FLOAT, DOUBLE, NEWDECIMAL, YEAR, DATE, TIMESTAMP,
DATETIME2/TIMESTAMP2/TIME2, BIT up to 64 bits, ENUM, SET, and CHAR/BINARY/VARCHAR/BLOB/TEXT/
GEOMETRY as bytes or in UTF-8, ASCII and latin1), :meth:`RowDecoder.decode_rows`,
:meth:`~RowDecoder.decode_row_pairs`, :meth:`~RowDecoder.decode_image` and
:meth:`~RowDecoder.count_rows` run in C and build the same Python objects with the C API:
the same values, types and errors (its ``IndexError`` is translated like the generated
code's; ``tests/unit/binlog/test_rowimage_differential.py`` compares both on random images).
The C code hands an input back (returns None) where the generated code decides: a buffer
that is not ``bytes``, an ``end`` past it, or a value whose Python form is arithmetic on
out-of-range fields (a DECIMAL group above its digits, a DATETIME2 before year 0). MySQL's
binary JSON, partial JSON, VECTOR, the pre-5.6 temporals, the NULL type and other charsets
stay on the generated code; so does everything when the extension is not built
(:data:`NATIVE` is False).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Context, Decimal
from typing import Any

from headwater.binlog import _temporal as tm
from headwater.binlog._columns import (
    Col,
    ColumnDef,
    Fixed,
    NativeSpec,
    PartialJson,
    Spec,
    column_plan,
    column_spec,
    decimal_size,
    json_diffs,
    native_spec,
    value_width,
    vector,
)
from headwater.binlog.constants import ColumnType
from headwater.binlog.jsonb import decode_json
from headwater.binlog.tablemap import TableMap
from headwater.errors import BinlogFormatError, TruncatedError

try:
    from headwater._native import _rowimage
except ImportError:  # built without the C extension: the generated Python code only
    _rowimage = None  # type: ignore[assignment]
try:
    from headwater._native import _imagejson
except ImportError:  # built without it: images are always decoded to values first
    _imagejson = None  # type: ignore[assignment]

__all__ = ["ColumnDef", "PartialJson", "RowDecoder", "decimal_size", "row_decoder_for"]

_T = ColumnType

#: Errors the generated code raises on short or garbled input; translated at the boundary.
DECODE_ERRORS = (IndexError, struct.error, ValueError, OverflowError, TypeError)

#: Whether decoders use the compiled row images (``headwater._native._rowimage``) where
#: every column of an image has a compiled reader.
NATIVE = _rowimage is not None
_TRUNCATED = "row image runs past the end of the event"


# ---------------------------------------------------------------------------------------
# Code generation

_ENV_BASE: dict[str, object] = {
    "_D": Decimal,
    # DECIMAL has at most 65 digits: scaleb in a 65-digit context never rounds.
    "_scaleb": Context(prec=65).scaleb,
    # scaleb's exponents (DECIMAL scale is at most 30), as Decimals: no conversion per call.
    **{f"_E{scale}": Decimal(-scale) for scale in range(31)},
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
    "_json_diffs": json_diffs,
    "_vector": vector,
    "_Trunc": TruncatedError,
}


class _Gen:
    """Builds the source of one generated module; ``env`` collects its globals."""

    def __init__(self, plan: tuple[Col, ...]) -> None:
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
        specs: list[tuple[str, Spec]] = []
        json_ordinal = {
            i: n for n, i in enumerate(j for j, c in enumerate(self.plan) if c.type == _T.JSON)
        }
        for j, i in enumerate(present):
            col = self.plan[i]
            is_partial = col.type == _T.JSON and bool(partial >> json_ordinal[i] & 1)
            specs.append((f"{prefix}{j}", column_spec(col, i, self.env, is_partial)))
        n = len(present)
        if n == 0:
            return []
        nb = (n + 7) // 8
        lines = [
            "_nb = buf[p]" if nb == 1 else f"_nb = _from_bytes(buf[p:p + {nb}], 'little')",
            "if not _nb:",
        ]
        lines += _indent(self._fast(specs, prefix, nb))
        lines.append("else:")
        slow: list[str] = [f"p += {nb}"]
        for j, (var, spec) in enumerate(specs):
            slow += [f"if _nb & {1 << j}:", f"    {var} = None", "else:"]
            if isinstance(spec, Fixed):
                run, size = self._run([(var, spec)], f"{prefix}{j}_", 0)
                slow += _indent([*run, f"p += {size}"] if size else run)
            else:
                slow += _indent(spec.code(var, 0))
        lines += _indent(slow)
        return lines

    def _fast(self, specs: list[tuple[str, Spec]], prefix: str, off: int) -> list[str]:
        """The image without NULLs: ``p`` is advanced only by variable-width columns (and
        once at the end); fixed-width reads are at constant offsets from it."""
        lines: list[str] = []
        run: list[tuple[str, Spec]] = []
        endian = ""

        def flush() -> None:
            nonlocal run, endian, off
            if run:
                code, off = self._run(run, f"{prefix}r{len(lines)}_", off)
                lines.extend(code)
            run, endian = [], ""

        for var, spec in specs:
            if isinstance(spec, Fixed) and (not spec.endian or not endian or spec.endian == endian):
                run.append((var, spec))
                endian = endian or spec.endian
                continue
            flush()
            if isinstance(spec, Fixed):
                run, endian = [(var, spec)], spec.endian
            else:
                lines += spec.code(var, off)
                off = 0
        flush()
        if off:
            lines.append(f"p += {off}")
        return lines

    def _run(self, run: list[tuple[str, Spec]], tmp: str, off: int) -> tuple[list[str], int]:
        """One struct read at ``p + off`` for adjacent fixed-width columns, then their
        conversions; returns the lines and the offset after the run."""
        fmt = "".join(s.fmt for _, s in run if isinstance(s, Fixed))
        endian = next((s.endian for _, s in run if isinstance(s, Fixed) and s.endian), "<")
        size = sum(s.size for _, s in run if isinstance(s, Fixed))
        targets: list[str] = []
        convs: list[str] = []
        for n, (var, spec) in enumerate(run):
            assert isinstance(spec, Fixed)
            if spec.conv is None:
                targets.append(var)
                continue
            temps = [f"_{tmp}{n}_{i}" for i in range(spec.nfields)]
            targets += temps
            convs += spec.conv(var, temps)
        lines = []
        if targets:
            at = f"p + {off}" if off else "p"
            lines.append(f"{', '.join(targets)}, = {self._struct(endian + fmt)}(buf, {at})")
        return lines + convs, off + size

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


def _count_image(widths: Sequence[int], present: Sequence[int]) -> list[str]:
    """Lines advancing ``p`` over one image of the ``present`` columns, decoding nothing:
    a straight run when its null bitmap is all zero (fixed widths summed into constant
    offsets), else a test of each column's null bit."""
    nb = (len(present) + 7) // 8
    fast: list[str] = []
    off = nb
    for k in present:
        w = widths[k]
        if w >= 0:
            off += w
            continue
        fast.append(f"p += {off - w} + {_len_expr(-w, off)}")
        off = 0
    if off:
        fast.append(f"p += {off}")
    slow = [f"_nulls = _from_bytes(buf[p:p + {nb}], 'little')", f"p += {nb}"]
    for i, k in enumerate(present):
        w = widths[k]
        step = str(w) if w >= 0 else f"{-w} + {_len_expr(-w, 0)}"
        slow.append(f"if not _nulls & {1 << i}: p += {step}")
    zero = "not buf[p]" if nb == 1 else f"buf[p:p + {nb}] == {bytes(nb)!r}"
    return [f"if {zero}:", *_indent(fast or ["pass"]), "else:", *_indent(slow)]


def _len_expr(nbytes: int, off: int) -> str:
    at = f"p + {off}" if off else "p"
    if nbytes == 1:
        return f"buf[{at}]"
    if nbytes == 2:
        return f"(buf[{at}] | buf[{at} + 1] << 8)"
    return f"_from_bytes(buf[{at}:{at} + {nbytes}], 'little')"


class RowDecoder:
    """Decodes the row images of one table shape; generated code is cached per image shape.

    ``present`` arguments are the column indexes in the image, ascending (from the
    columns-present bitmaps of the rows event). Methods raise :class:`TruncatedError` when
    the bytes end inside a row and :class:`BinlogFormatError` on bytes that do not decode.

    ``native`` (default :data:`NATIVE`): decode images whose every column the C extension
    reads (:func:`._columns.native_spec`) in C, the same values and errors; the generated
    code takes the other images, and the inputs the C code hands back (see rowimage.c).
    """

    def __init__(
        self,
        table_map: TableMap,
        columns: Sequence[ColumnDef] | None = None,
        *,
        native: bool | None = None,
    ) -> None:
        self.table_map = table_map
        self.plan = column_plan(table_map, columns)
        self._image: dict[tuple[tuple[int, ...], int], Callable[..., Any]] = {}
        self._rows: dict[tuple[int, ...], Callable[..., Any]] = {}
        self._pairs: dict[tuple[tuple[int, ...], tuple[int, ...]], Callable[..., Any]] = {}
        self._counts: dict[tuple[tuple[int, ...], tuple[int, ...]], Callable[..., Any]] = {}
        self._py_counts: dict[tuple[tuple[int, ...], tuple[int, ...]], Callable[..., Any]] = {}
        use = NATIVE if native is None else native and NATIVE
        self._specs: tuple[NativeSpec | None, ...] | None = (
            tuple(native_spec(c) for c in self.plan) if use else None
        )
        self._natives: dict[tuple[int, ...], Any] = {}
        self._shapes: dict[tuple[int, ...], Any] = {}

    def _native(self, present: tuple[int, ...]) -> Any:
        """The compiled image of ``present`` (a ``_rowimage.Image``), or None."""
        try:
            return self._natives[present]
        except KeyError:
            pass
        image = None
        specs = self._specs
        if specs is not None and all(0 <= i < len(specs) and specs[i] for i in present):
            kinds = _rowimage.KINDS
            chosen = [specs[i] for i in present]
            image = _rowimage.Image(
                tuple((kinds[s[0]], s[1], s[2], s[3]) for s in chosen if s is not None)
            )
        self._natives[present] = image
        return image

    def json_shape(self, present: Sequence[int]) -> Any:
        """The ``_imagejson.RowShape`` of the image of ``present`` (its JSON text written
        straight from the event's bytes, ``render_raw``), or None when a column is of a
        kind it does not render (ENUM, SET, JSON, ...), the image is empty, or the C
        decoder is off for this decoder (``native``): then the rows are decoded."""
        key = tuple(present)
        try:
            return self._shapes[key]
        except KeyError:
            pass
        shape = None
        specs = self._specs
        if (
            _imagejson is not None
            and specs is not None
            and key
            and all(0 <= i < len(specs) for i in key)
        ):
            chosen = [specs[i] for i in key]
            kinds = _imagejson.RAW_KINDS
            if all(s is not None and s[0] in kinds for s in chosen):
                try:
                    shape = _imagejson.RowShape(tuple(s for s in chosen if s is not None))
                except ValueError:  # a charmap table holding a surrogate
                    shape = None
        self._shapes[key] = shape
        return shape

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

    def _count_fn(self, first: tuple[int, ...], second: tuple[int, ...]) -> Callable[..., Any]:
        """``count(buf, p, end) -> rows``: compiled when both images are, else generated."""
        fn = self._counts.get((first, second))
        if fn is None:
            fn = self._native_counter(first, second) or self._py_count_fn(first, second)
            self._counts[(first, second)] = fn
        return fn

    def _native_counter(
        self, first: tuple[int, ...], second: tuple[int, ...]
    ) -> Callable[..., Any] | None:
        a = self._native(first)
        b = self._native(second) if second else None
        if a is None or (second and b is None):
            return None
        count = _rowimage.count
        python = self._py_count_fn

        def fn(buf: Any, p: int, end: int) -> int:
            try:
                n = count(a, b, buf, p, end)
            except IndexError:
                raise TruncatedError(_TRUNCATED) from None
            return python(first, second)(buf, p, end) if n is None else n

        return fn

    def _py_count_fn(self, first: tuple[int, ...], second: tuple[int, ...]) -> Callable[..., Any]:
        fn = self._py_counts.get((first, second))
        if fn is None:
            widths = [value_width(c) for c in self.plan]
            lines = ["def count(buf, p, end):", "    n = 0", "    while p < end:"]
            lines += _indent(_indent(_count_image(widths, first)))
            if second:
                lines += _indent(_indent(_count_image(widths, second)))
            lines += [
                "        n += 1",
                "    if p != end:",
                "        raise _Trunc('row image runs past the end of the event')",
                "    return n",
            ]
            fn = self._py_counts[(first, second)] = _Gen(self.plan).compile("count", lines)
        return fn

    def count_rows(
        self,
        buf: bytes,
        pos: int,
        end: int,
        present: Sequence[int],
        after: Sequence[int] | None = None,
    ) -> int:
        """How many rows ``buf[pos:end]`` holds (one image each, or a ``present`` image and
        an ``after`` image per row for UPDATE_ROWS), walking the values' lengths without
        building any value: the same count as :meth:`decode_rows` /
        :meth:`decode_row_pairs`, for a fraction of their cost."""
        if not present or (after is not None and not after):
            raise BinlogFormatError("rows event with no columns in an image")
        try:
            return self._count_fn(tuple(present), tuple(after or ()))(buf, pos, end)  # type: ignore[no-any-return]
        except DECODE_ERRORS as exc:
            raise _translate(exc) from None

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
        try:
            image = self._native(cols)
            done = _rowimage.image(image, buf, pos) if image is not None else None
            if done is not None:
                values, end = done
            else:
                values, end = self._image_fn(cols, partial_json)(buf, pos, len(buf))
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
        cols = tuple(present)
        try:
            image = self._native(cols)
            if image is not None:
                rows = _rowimage.rows(image, buf, pos, end)
                if rows is not None:
                    return rows
            return self._rows_fn(cols)(buf, pos, end)  # type: ignore[no-any-return]
        except DECODE_ERRORS as exc:
            raise _translate(exc) from None

    def decode_row_pairs(
        self, buf: bytes, pos: int, end: int, before: Sequence[int], after: Sequence[int]
    ) -> list[tuple[tuple[object, ...], tuple[object, ...]]]:
        """Every (before, after) pair of images in ``buf[pos:end]`` (UPDATE_ROWS)."""
        if not before and not after:
            raise BinlogFormatError("rows event with no columns in its images")
        first, second = tuple(before), tuple(after)
        try:
            b, a = self._native(first), self._native(second)
            if b is not None and a is not None:
                pairs = _rowimage.pairs(b, a, buf, pos, end)
                if pairs is not None:
                    return pairs
            return self._pairs_fn(first, second)(buf, pos, end)  # type: ignore[no-any-return]
        except DECODE_ERRORS as exc:
            raise _translate(exc) from None


def _translate(exc: Exception) -> BinlogFormatError:
    """A decode failure in the format's terms: Python's own texts (struct's "unpack_from
    requires a buffer", "index out of range", codec and type errors) never reach the user."""
    if isinstance(exc, IndexError | struct.error):
        return TruncatedError("row image runs past the end of the event")
    if isinstance(exc, UnicodeDecodeError):
        reason = "a code point above U+10FFFF" if "range(" in exc.reason else exc.reason
        return BinlogFormatError(
            f"a string value is not valid in its column's charset ({exc.encoding}): {reason}"
        )
    if isinstance(exc, ValueError) and not isinstance(exc, UnicodeError):
        # datetime/Decimal say what is out of range ("month must be in 1..12")
        return BinlogFormatError(f"row value does not decode: {exc}")
    return BinlogFormatError("row value does not decode: its bytes are not a value of its type")


_DECODERS: OrderedDict[tuple[object, ...], RowDecoder] = OrderedDict()
_DECODERS_MAX = 1024


#: The decoder last returned for a TableMap object (by identity: the entry holds the map,
#: so its id cannot be reused while it is here). DecodeContext hands out the same TableMap
#: object for every repetition of a TABLE_MAP, so this skips building the shape key.
_BY_MAP: dict[int, tuple[TableMap, Sequence[ColumnDef] | None, RowDecoder]] = {}


def row_decoder_for(table_map: TableMap, columns: Sequence[ColumnDef] | None = None) -> RowDecoder:
    """The :class:`RowDecoder` for this table shape, built once and kept (LRU, 1024)."""
    hit = _BY_MAP.get(id(table_map))
    if hit is not None and hit[0] is table_map and hit[1] is columns:
        return hit[2]
    dec = _decoder_for_shape(table_map, columns)
    if len(_BY_MAP) >= _DECODERS_MAX:
        _BY_MAP.clear()
    _BY_MAP[id(table_map)] = (table_map, columns, dec)
    return dec


def _decoder_for_shape(table_map: TableMap, columns: Sequence[ColumnDef] | None) -> RowDecoder:
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
