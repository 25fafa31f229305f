"""The compiled row decoder (``headwater._native._rowimage``) against the generated Python one.

Random table maps of every type the C code reads (integers of each width and signedness,
FLOAT, DOUBLE, NEWDECIMAL, YEAR, DATE, TIMESTAMP, DATETIME2/TIMESTAMP2/TIME2 of each fsp,
BIT, ENUM and SET with and without names, CHAR/BINARY/VARCHAR/BLOB/TEXT/GEOMETRY in utf8,
utf8mb4, latin1, ascii and binary) and random row images (valid encodings from
``_binlog_encode``, random bytes of the right width, NULLs, invalid text bytes), then
truncated and mutated: ``RowDecoder(native=True)`` and ``RowDecoder(native=False)`` must give
the same values (same types, Decimal digits and exponent, float bits, tzinfo) or the same
error (type and message), for decode_rows, decode_row_pairs, decode_image and count_rows.
"""

from __future__ import annotations

import struct
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from _binlog_encode import (
    enc_date,
    enc_datetime2,
    enc_decimal,
    enc_time2,
    enc_timestamp2,
    image,
)
from hypothesis import HealthCheck, given, settings, strategies as st

from headwater._native import _rowimage
from headwater.binlog.codec import NATIVE, RowDecoder
from headwater.binlog.constants import ColumnType as T
from headwater.binlog.tablemap import TableMap

#: utf8mb3, utf8mb4 (two collations), latin1, ascii, binary, no charset metadata
COLLATIONS = (33, 45, 255, 8, 11, 63, None)
TEXT_TYPES = (T.STRING, T.VARCHAR, T.BLOB)

Column = tuple[int, int, bool, int | None, tuple[str, ...] | None, tuple[str, ...] | None]


def _string_meta(length: int) -> int:
    """CHAR(n) metadata: lengths over 255 keep bits 8-9 XORed into the real-type byte
    (Field_string::do_save_field_metadata)."""
    b0 = (T.STRING & ~0x30) | ((((length >> 8) & 3) << 4) ^ 0x30)
    return b0 << 8 | (length & 0xFF)


@st.composite
def column(draw: st.DrawFn) -> Column:
    kinds = ("int", "float", "decimal", "temporal", "temporal", "misc", "misc", "text", "text")
    kind = draw(st.sampled_from(kinds))
    unsigned = draw(st.booleans())
    if kind == "int":
        t = draw(st.sampled_from((T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG)))
        return (t, 0, unsigned, None, None, None)
    if kind == "float":
        t, meta = draw(st.sampled_from(((T.FLOAT, 4), (T.DOUBLE, 8))))
        return (t, meta, False, None, None, None)
    if kind == "decimal":
        precision = draw(st.integers(1, 65))
        scale = draw(st.integers(0, min(30, precision)))
        return (T.NEWDECIMAL, precision << 8 | scale, False, None, None, None)
    if kind == "temporal":
        t = draw(st.sampled_from((T.DATETIME2, T.TIMESTAMP2, T.TIME2, T.DATE, T.YEAR, T.TIMESTAMP)))
        fsp = draw(st.integers(0, 6)) if t in (T.DATETIME2, T.TIMESTAMP2, T.TIME2) else 0
        return (t, fsp, False, None, None, None)
    if kind == "misc":
        t = draw(st.sampled_from((T.BIT, T.ENUM, T.SET, T.GEOMETRY)))
        few = st.lists(st.text(max_size=3), min_size=1, max_size=4)
        names = draw(st.none() | few | st.lists(st.text(max_size=2), min_size=60, max_size=70))
        if t == T.BIT:
            nbytes, bits = draw(st.integers(0, 8)), draw(st.integers(0, 7))
            if nbytes == 8:
                bits = 0
            return (T.BIT, nbytes << 8 | bits, False, None, None, None)
        if t == T.ENUM:
            size = draw(st.sampled_from((1, 2)))
            return (T.ENUM, T.ENUM << 8 | size, False, None, tuple(names or ()) or None, None)
        if t == T.SET:
            size = draw(st.integers(1, 8))
            return (T.SET, T.SET << 8 | size, False, None, None, tuple(names or ()) or None)
        return (T.GEOMETRY, draw(st.integers(1, 4)), False, None, None, None)
    t = draw(st.sampled_from(TEXT_TYPES))
    collation = draw(st.sampled_from(COLLATIONS))
    if t == T.STRING:
        meta = _string_meta(draw(st.sampled_from((1, 4, 16, 255, 256, 300, 767))))
    elif t == T.VARCHAR:
        meta = draw(st.sampled_from((1, 16, 255, 256, 1020, 65535)))
    else:
        meta = draw(st.integers(1, 4))
    return (t, meta, False, collation, None, None)


def table(cols: list[Column]) -> TableMap:
    n = len(cols)
    return TableMap(
        table_id=1,
        flags=0,
        schema="d",
        table="t",
        column_types=tuple(c[0] for c in cols),
        column_meta=tuple(c[1] for c in cols),
        nullable=(True,) * n,
        signedness=tuple(c[2] for c in cols),
        charsets=tuple(c[3] for c in cols),
        enum_values=tuple(c[4] for c in cols),
        set_values=tuple(c[5] for c in cols),
    )


def _prefix_bytes(col: Column) -> int:
    t, meta = col[0], col[1]
    if t == T.STRING:
        b0, b1 = meta >> 8, meta & 0xFF
        length = b1 | (((b0 & 0x30) ^ 0x30) << 4) if (b0 & 0x30) != 0x30 else b1
        return 1 if length < 256 else 2
    if t == T.VARCHAR:
        return 1 if meta < 256 else 2
    return meta  # BLOB, GEOMETRY


TEXTS = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=20).map(str.encode),
    st.binary(max_size=8).map(lambda b: b + b"\x80\xc3\x28\xff"),
)


@st.composite
def value(draw: st.DrawFn, col: Column) -> bytes:
    t, meta = col[0], col[1]
    if t in (*TEXT_TYPES, T.GEOMETRY):
        data = draw(TEXTS)
        if t == T.STRING and col[3] == 63:  # BINARY(n): the server strips trailing 0x00
            data = data.rstrip(b"\0")
        nbytes = _prefix_bytes(col)
        return len(data).to_bytes(nbytes, "little") + data
    valid = draw(st.booleans())
    if valid and t == T.NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        digits = draw(
            st.text(alphabet="0123456789", min_size=precision, max_size=precision)
            | st.just("0" * precision)  # zero, and the negative zero the server can log
        )
        sign = draw(st.sampled_from(("", "-")))
        intg = precision - scale
        text = sign + (digits[:intg] or "0") + ("." + digits[intg:] if scale else "")
        return enc_decimal(text, precision, scale)
    if valid and t == T.DATETIME2:
        d = draw(st.datetimes(min_value=datetime(1, 1, 1)))
        return enc_datetime2(
            d.year, d.month, d.day, d.hour, d.minute, d.second, _usec(d.microsecond, meta), meta
        )
    if valid and t == T.TIMESTAMP2:
        return enc_timestamp2(
            draw(st.integers(0, 2**32 - 1)), _usec(draw(st.integers(0, 999999)), meta), meta
        )
    if valid and t == T.TIME2:
        us = draw(st.integers(0, (838 * 3600 + 3599) * 10**6))
        sign = draw(st.sampled_from((1, -1)))
        return enc_time2(timedelta(microseconds=sign * _usec(us, meta)), meta)
    if valid and t == T.DATE:
        d = draw(st.dates())
        return enc_date(d.year, d.month, d.day)
    width = {
        T.TINY: 1, T.SHORT: 2, T.INT24: 3, T.LONG: 4, T.LONGLONG: 8, T.FLOAT: 4, T.DOUBLE: 8,
        T.YEAR: 1, T.DATE: 3, T.TIMESTAMP: 4,
        T.DATETIME2: 5 + (meta + 1) // 2, T.TIMESTAMP2: 4 + (meta + 1) // 2,
        T.TIME2: 3 + (meta + 1) // 2,
    }.get(t)  # fmt: skip
    if width is None:
        if t == T.NEWDECIMAL:
            precision, scale = meta >> 8, meta & 0xFF
            intg = precision - scale
            dig2 = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
            width = intg // 9 * 4 + dig2[intg % 9] + scale // 9 * 4 + dig2[scale % 9]
        elif t == T.BIT:
            width = (meta >> 8) + (1 if meta & 0xFF else 0)
        else:  # ENUM, SET
            width = meta & 0xFF
    if t in (T.ENUM, T.SET) and draw(st.booleans()):
        names = col[4] if t == T.ENUM else col[5]
        top = len(names or ()) + 1 if t == T.ENUM else (1 << min(len(names or ()), 8)) + 1
        return draw(st.integers(0, top)).to_bytes(width, "little")  # around the names' range
    return draw(st.binary(min_size=width, max_size=width))


def _usec(us: int, fsp: int) -> int:
    return us // 10 ** (6 - fsp) * 10 ** (6 - fsp)


@st.composite
def case(draw: st.DrawFn) -> tuple[list[Column], list[bytes], tuple[int, ...], tuple[int, ...]]:
    cols = draw(st.lists(column(), min_size=1, max_size=12))
    n = len(cols)
    subset = st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True).map(
        lambda xs: tuple(sorted(xs))
    )
    first = draw(st.just(tuple(range(n))) | subset)
    second = draw(st.just(tuple(range(n))) | subset)
    images = []
    for _ in range(draw(st.integers(1, 4)) * 2):
        present = first if len(images) % 2 == 0 else second
        vals = [None if draw(st.integers(0, 4)) == 0 else draw(value(cols[i])) for i in present]
        images.append(image(vals))
    return cols, images, first, second


def norm(v: Any) -> Any:
    """A value with everything equality would blur made explicit."""
    if isinstance(v, tuple | list):
        return (type(v).__name__, [norm(x) for x in v])
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, Decimal):
        return ("Decimal", v.as_tuple())
    if isinstance(v, datetime | date | time):
        return (type(v).__name__, v.isoformat(), getattr(v, "tzinfo", None))
    if isinstance(v, timedelta):
        return ("timedelta", v.days, v.seconds, v.microseconds)
    return (type(v).__name__, v)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", norm(fn(*args)))
    except Exception as exc:  # the error itself is the result compared
        return ("error", type(exc).__name__, str(exc))


def compare(
    c: RowDecoder, py: RowDecoder, buf: bytes, first: tuple[int, ...], second: tuple[int, ...]
) -> None:
    end = len(buf)
    for pos in (0, 1):
        assert outcome(c.decode_rows, buf, pos, end, first) == outcome(
            py.decode_rows, buf, pos, end, first
        )
        assert outcome(c.decode_row_pairs, buf, pos, end, first, second) == outcome(
            py.decode_row_pairs, buf, pos, end, first, second
        )
        assert outcome(c.decode_image, buf, pos, first) == outcome(py.decode_image, buf, pos, first)
        assert outcome(c.count_rows, buf, pos, end, first) == outcome(
            py.count_rows, buf, pos, end, first
        )
        assert outcome(c.count_rows, buf, pos, end, first, second) == outcome(
            py.count_rows, buf, pos, end, first, second
        )
    # rows that end before the event's end, and the end before the last row's bytes
    assert outcome(c.decode_rows, buf, 0, end - 1, first) == outcome(
        py.decode_rows, buf, 0, end - 1, first
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case(), st.data())
def test_compiled_and_generated_decoders_agree(
    spec: tuple[list[Column], list[bytes], tuple[int, ...], tuple[int, ...]], data: st.DataObject
) -> None:
    cols, images, first, second = spec
    tm = table(cols)
    c, py = RowDecoder(tm, native=True), RowDecoder(tm, native=False)
    assert c._native(first) is not None and c._native(second) is not None  # the C path is taken
    assert py._native(first) is None
    rows_only = b"".join(img for i, img in enumerate(images) if i % 2 == 0)
    pairs = b"".join(images)
    compare(c, py, rows_only, first, first)
    compare(c, py, pairs, first, second)
    # truncations and mutations
    cut = data.draw(st.integers(0, len(pairs)))
    compare(c, py, pairs[:cut], first, second)
    edits = data.draw(
        st.lists(st.tuples(st.integers(0, len(pairs) - 1), st.integers(0, 255)), max_size=4)
    )
    mutated = bytearray(pairs)
    for at, byte in edits:
        mutated[at] = byte
    compare(c, py, bytes(mutated), first, second)


def test_every_supported_type_takes_the_compiled_path() -> None:
    """One valid value of each kind: the C function itself returns the row (no hand-back
    to Python), equal to the generated decoder's."""
    cols: list[Column] = [
        (T.TINY, 0, False, None, None, None), (T.TINY, 0, True, None, None, None),
        (T.SHORT, 0, True, None, None, None), (T.INT24, 0, False, None, None, None),
        (T.LONG, 0, True, None, None, None), (T.LONGLONG, 0, True, None, None, None),
        (T.FLOAT, 4, False, None, None, None), (T.DOUBLE, 8, False, None, None, None),
        (T.NEWDECIMAL, 12 << 8 | 2, False, None, None, None), (T.YEAR, 0, False, None, None, None),
        (T.DATE, 0, False, None, None, None), (T.DATETIME2, 6, False, None, None, None),
        (T.TIMESTAMP2, 3, False, None, None, None), (T.TIME2, 2, False, None, None, None),
        (T.BIT, 1 << 8 | 3, False, None, None, None),
        (T.ENUM, T.ENUM << 8 | 1, False, None, ("a", "b"), None),
        (T.SET, T.SET << 8 | 1, False, None, None, ("x", "y", "z")),
        (T.VARCHAR, 40, False, 255, None, None), (T.VARCHAR, 40, False, 8, None, None),
        (T.VARCHAR, 40, False, 11, None, None), (T.STRING, _string_meta(4), False, 63, None, None),
        (T.BLOB, 4, False, 45, None, None), (T.BLOB, 2, False, 63, None, None),
        (T.TIMESTAMP, 0, False, None, None, None),
    ]  # fmt: skip
    raw = [
        b"\xff", b"\xff", b"\xff\xff", b"\x00\x00\x80", b"\xff\xff\xff\xff", b"\xff" * 8,
        struct.pack("<f", 1.5), struct.pack("<d", -2.25), enc_decimal("-1234.56", 12, 2),
        b"\x7c", enc_date(2024, 2, 29), enc_datetime2(2024, 1, 2, 3, 4, 5, 678901, 6),
        enc_timestamp2(1700000000, 123000, 3), enc_time2(timedelta(hours=-1, seconds=-1), 2),
        b"\x01\x05", b"\x02", b"\x05", b"\x04caf\xc3", b"\x02\x80\x81", b"\x02a\xff",
        b"\x02ab", b"\x06\x00\x00\x00h\xc3\xa9llo", b"\x01\x00\x00", b"\x00\x00\x00\x01",
    ]  # fmt: skip
    tm = table(cols)
    c, py = RowDecoder(tm, native=True), RowDecoder(tm, native=False)
    buf = image(raw)
    present = tuple(range(len(cols)))
    native = c._native(present)
    assert native is not None
    decoded = _rowimage.rows(native, buf, 0, len(buf))
    assert decoded is not None
    assert norm(decoded) == norm(py.decode_rows(buf, 0, len(buf), present))
    assert decoded[0][:4] == (-1, 255, 65535, -(1 << 23))
    assert decoded[0][8] == Decimal("-1234.56")
    assert decoded[0][17:20] == ("caf\udcc3", "\u20ac\x81", "a\udcff")
    assert decoded[0][20:22] == (b"ab\x00\x00", "h\xe9llo")
    assert decoded[0][14:17] == (261, "b", ("x", "z"))


def test_edge_values_take_the_compiled_path() -> None:
    """Values the Python path builds by special cases: the ENUM '' error value and an index
    past the names, a SET mask past them, DECIMAL's negative zero, the zero TIMESTAMP2,
    the zero DATETIME2 and an invalid DATE as text, BINARY(n) longer than n."""
    cols: list[Column] = [
        (T.ENUM, T.ENUM << 8 | 1, False, None, ("a", "b"), None),
        (T.ENUM, T.ENUM << 8 | 2, False, None, ("a", "b"), None),
        (T.SET, T.SET << 8 | 1, False, None, None, ("x", "y")),
        (T.NEWDECIMAL, 5 << 8 | 2, False, None, None, None),
        (T.TIMESTAMP2, 4, False, None, None, None),
        (T.DATETIME2, 2, False, None, None, None),
        (T.DATE, 0, False, None, None, None),
        (T.STRING, _string_meta(2), False, 63, None, None),
        (T.TIMESTAMP2, 0, False, None, None, None),
    ]
    raw = [
        b"\x00",
        b"\x03\x00",
        b"\x04",
        bytes(b ^ 0xFF for b in enc_decimal("0.00", 5, 2)),
        b"\x00" * 6,
        enc_datetime2(0, 0, 0, fsp=2),
        enc_date(2023, 2, 29),
        b"\x03abc",
        b"\x00" * 4,
    ]
    expected = ("", 3, 4, ("Decimal", (0, (0,), -2)), "0000-00-00 00:00:00.0000")
    expected += ("0000-00-00 00:00:00.00", "2023-02-29", b"abc", "0000-00-00 00:00:00")
    tm = table(cols)
    buf = image(raw)
    present = tuple(range(len(cols)))
    decoded = _rowimage.rows(RowDecoder(tm, native=True)._native(present), buf, 0, len(buf))
    assert decoded is not None
    assert norm(decoded) == norm(
        RowDecoder(tm, native=False).decode_rows(buf, 0, len(buf), present)
    )
    values = tuple(("Decimal", v.as_tuple()) if isinstance(v, Decimal) else v for v in decoded[0])
    assert values == expected


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 65).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, min(30, p)))),
    st.lists(st.integers(0, 10**65 - 1) | st.just(0), min_size=1, max_size=10),
    st.booleans(),
)
def test_decimals_built_in_place_and_from_text_agree(
    shape: tuple[int, int], unscaled: list[int], negative: bool
) -> None:
    """DECIMAL values come from Decimal objects filled in place (CPython's layout, checked
    at import) or from Decimal(text): both equal the generated code's, digit for digit."""
    precision, scale = shape
    tm = table([(T.NEWDECIMAL, precision << 8 | scale, False, None, None, None)])
    values = [u % 10**precision * (-1 if negative else 1) for u in unscaled]
    buf = b"".join(image([enc_decimal(Decimal(f"{v}E-{scale}"), precision, scale)]) for v in values)
    expected = norm(RowDecoder(tm, native=False).decode_rows(buf, 0, len(buf), (0,)))
    native = RowDecoder(tm, native=True)._native((0,))
    was = _rowimage._decimal_direct(False)
    try:
        assert norm(_rowimage.rows(native, buf, 0, len(buf))) == expected
        _rowimage._decimal_direct(True)
        assert norm(_rowimage.rows(native, buf, 0, len(buf))) == expected
    finally:
        _rowimage._decimal_direct(was)


def test_decimals_are_built_in_place_on_this_python() -> None:
    assert _rowimage.DECIMAL_DIRECT


def test_unsupported_columns_take_the_generated_path() -> None:
    """MySQL binary JSON, a ucs2 column: no compiled image, the Python decoder's values."""
    tm = table([(T.JSON, 4, False, None, None, None), (T.VARCHAR, 40, False, 35, None, None)])
    dec = RowDecoder(tm, native=True)
    assert dec._native((0,)) is None and dec._native((1,)) is None
    buf = image([None, b"\x02\x00a"])
    assert dec.decode_rows(buf, 0, len(buf), (0, 1)) == [(None, "a")]


def test_corrupt_values_are_handed_back_to_python() -> None:
    """A DECIMAL group above 999999999 and a DATETIME2 below year 0: the C code returns
    None and the generated code's values (arithmetic on the out-of-range fields) stand."""
    tm = table(
        [
            (T.NEWDECIMAL, 18 << 8 | 0, False, None, None, None),
            (T.DATETIME2, 0, False, None, None, None),
        ]
    )
    c, py = RowDecoder(tm, native=True), RowDecoder(tm, native=False)
    buf = image([b"\xff" * 8, enc_datetime2(2024, 1, 1)])
    native = c._native((0, 1))
    assert _rowimage.rows(native, buf, 0, len(buf)) is None
    assert norm(c.decode_rows(buf, 0, len(buf), (0, 1))) == norm(
        py.decode_rows(buf, 0, len(buf), (0, 1))
    )
    buf = image([enc_decimal("1", 18, 0), b"\x00" * 5])
    assert _rowimage.rows(native, buf, 0, len(buf)) is None
    assert c.decode_rows(buf, 0, len(buf), (0, 1)) == py.decode_rows(buf, 0, len(buf), (0, 1))


def test_native_is_on_by_default() -> None:
    assert NATIVE
