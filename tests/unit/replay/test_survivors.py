"""The C survivor decoder (_native/survivors.c) against the Python route it replaces.

The key-first replay decodes the after images of surviving puts into the physical
columns of :mod:`headwater.spark.asofread` (``_v`` typed, ``_t`` text). The Python route
is the generated row decoder (``RowDecoder(native=False)``) then
:func:`headwater.spark.asofread._physical` per batch; the C route decodes straight into
Arrow buffers. Tables of generated columns of the common types (integers of every width
and signedness, YEAR, FLOAT, DOUBLE, DECIMAL within and beyond 38 digits, DATE,
DATETIME2/TIMESTAMP2/TIME2, CHAR/VARCHAR/TEXT in utf8mb4, utf8mb3, latin1 and ascii,
BLOB/VARBINARY, JSON, BIT, ENUM, SET), some typed otherwise by the definition at the
replay's point (an ``ALTER ... MODIFY`` on the way), get random row images (valid
encodings, random bytes of the right width, NULLs, text with bytes invalid in its
charset). Whenever the C route takes a batch, it must equal the Python route's, which
then typed every value too; when it declines, the walker decodes the Python way.
Images are built as MySQL's sql/rpl_record.cc pack_row lays them out (_binlog_encode).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from headwater._native._survivors import Columns
from headwater.binlog.codec import RowDecoder
from headwater.binlog.constants import ColumnType as T
from headwater.binlog.tablemap import TableMap
from headwater.schema.model import Column, TableDef
from headwater.spark.asofread import read_spec
from headwater.spark.asofscan import ScanSpec, _arrow_table, _Columns, _Table, _targets
from headwater.spark.offsets import parse_options

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "binlog"))
from _binlog_encode import enc_date, enc_decimal, enc_prefixed, image

#: collation ids (MySQL share/charsets, information_schema.COLLATIONS) by charset
COLLATION = {"utf8mb4": 45, "utf8mb3": 33, "latin1": 8, "ascii": 11, "binary": 63}


class Kind:
    """One column type: its TABLE_MAP description and its definition's."""

    def __init__(
        self,
        ctype: int,
        meta: int,
        data_type: str,
        column_type: str,
        *,
        unsigned: bool = False,
        charset: str | None = None,
        width: int = 0,
        names: tuple[str, ...] | None = None,
    ) -> None:
        self.ctype, self.meta, self.unsigned, self.charset = ctype, meta, unsigned, charset
        self.data_type, self.column_type, self.width, self.names = (
            data_type,
            column_type,
            width,
            names,
        )

    def column(self, name: str) -> Column:
        return Column(
            name,
            self.data_type,
            self.column_type,
            unsigned=self.unsigned,
            charset=None if self.charset == "binary" else self.charset,
            enum_values=self.names if self.data_type == "enum" else None,
            set_values=self.names if self.data_type == "set" else None,
        )


def _ints() -> list[Kind]:
    out = []
    for ctype, name, width in (
        (T.TINY, "tinyint", 1),
        (T.SHORT, "smallint", 2),
        (T.INT24, "mediumint", 3),
        (T.LONG, "int", 4),
        (T.LONGLONG, "bigint", 8),
    ):
        out.append(Kind(ctype, 0, name, name, width=width))
        out.append(Kind(ctype, 0, name, f"{name} unsigned", unsigned=True, width=width))
    return out


def _decimal(p: int, s: int) -> Kind:
    return Kind(T.NEWDECIMAL, p << 8 | s, "decimal", f"decimal({p},{s})")


def _text(ctype: int, meta: int, data_type: str, column_type: str, charset: str) -> Kind:
    return Kind(ctype, meta, data_type, column_type, charset=charset)


KINDS: list[Kind] = [
    *_ints(),
    Kind(T.YEAR, 0, "year", "year", width=1),
    Kind(T.FLOAT, 4, "float", "float", width=4),
    Kind(T.DOUBLE, 8, "double", "double", width=8),
    _decimal(10, 2),
    _decimal(38, 10),
    _decimal(18, 0),
    _decimal(9, 9),
    _decimal(50, 5),  # beyond 38 digits: text in the typed view
    Kind(T.DATE, 0, "date", "date", width=3),
    Kind(T.DATETIME2, 3, "datetime", "datetime(3)", width=7),
    Kind(T.TIMESTAMP2, 0, "timestamp", "timestamp", width=4),
    Kind(T.TIME2, 6, "time", "time(6)", width=6),
    *[
        _text(T.VARCHAR, 200, "varchar", "varchar(50)", cs)
        for cs in ("utf8mb4", "utf8mb3", "latin1", "ascii")
    ],
    _text(T.VARCHAR, 1000, "varchar", "varchar(250)", "utf8mb4"),
    _text(T.STRING, 0xFE00 | 40, "char", "char(10)", "utf8mb4"),
    _text(T.BLOB, 2, "text", "text", "utf8mb4"),
    _text(T.BLOB, 2, "blob", "blob", "binary"),
    _text(T.VARCHAR, 40, "varbinary", "varbinary(40)", "binary"),
    _text(T.BLOB, 4, "longtext", "longtext", "utf8mb4"),  # MariaDB JSON is LONGTEXT
    Kind(T.BIT, 2 << 8 | 3, "bit", "bit(19)", width=3),
    Kind(T.ENUM, T.ENUM << 8 | 1, "enum", "enum('a','b','c')", width=1, names=("a", "b", "c")),
    Kind(T.SET, T.SET << 8 | 1, "set", "set('x','y')", width=1, names=("x", "y")),
]
#: the kinds the typed view types in the read (asofread ColumnSpec.fast), mostly drawn
TYPED = {"tinyint", "smallint", "mediumint", "int", "bigint", "year", "float", "double"}
TYPED |= {"decimal", "varchar", "char", "text", "longtext"}
FAST = [
    k
    for k in KINDS
    if k.data_type in TYPED
    and not (k.data_type == "bigint" and k.unsigned)
    and k.column_type != "decimal(50,5)"
]

TEXTS = st.one_of(
    st.text(max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12).map(str.encode),
    st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=8).map(
        lambda s: s.encode("latin-1")
    ),
    st.binary(max_size=12),
    st.binary(max_size=4).map(lambda b: b + b"\xed\xa0\x80"),  # an encoded surrogate
)


@st.composite
def value(draw: st.DrawFn, kind: Kind) -> bytes:
    """A valid encoding most of the time, else random bytes of the right width."""
    t, meta = kind.ctype, kind.meta
    if t in (T.VARCHAR, T.STRING, T.BLOB):
        data = draw(TEXTS)
        prefix = meta if t == T.BLOB else (1 if (t == T.STRING or meta < 256) else 2)
        if t == T.STRING:
            data = data[:40]
        return enc_prefixed(data, prefix)
    valid = draw(st.integers(0, 3)) > 0
    if t == T.NEWDECIMAL:
        p, s = meta >> 8, meta & 0xFF
        if valid:
            digits = draw(st.text(alphabet="0123456789", min_size=p, max_size=p))
            sign = draw(st.sampled_from(("", "-")))
            text = sign + (digits[: p - s] or "0") + ("." + digits[p - s :] if s else "")
            return enc_decimal(text, p, s)
        return draw(st.binary(min_size=len(enc_decimal("0", p, s)),
                              max_size=len(enc_decimal("0", p, s))))  # fmt: skip
    if t == T.DATE and valid:
        d = draw(st.dates())
        return enc_date(d.year, d.month, d.day)
    if t in (T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG) and valid:
        bits = kind.width * 8
        lo, hi = (0, 2**bits - 1) if kind.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        edge = st.sampled_from((lo, hi, 0, -1 if lo else 1))
        v = draw(st.integers(lo, hi) | edge)
        return v.to_bytes(kind.width, "little", signed=not kind.unsigned)
    if t == T.FLOAT and valid:
        return struct.pack("<f", draw(st.floats(width=32, allow_nan=False)))
    if t == T.DOUBLE and valid:
        return struct.pack("<d", draw(st.floats(allow_nan=False)))
    return draw(st.binary(min_size=kind.width, max_size=kind.width))


def table_map(kinds: list[Kind]) -> TableMap:
    n = len(kinds)
    return TableMap(
        table_id=1,
        flags=0,
        schema="d",
        table="t",
        column_types=tuple(k.ctype for k in kinds),
        column_meta=tuple(k.meta for k in kinds),
        nullable=(True,) * n,
        signedness=tuple(k.unsigned for k in kinds),
        charsets=tuple(COLLATION.get(k.charset or "") for k in kinds),
        column_names=tuple(f"c{i}" for i in range(n)),
        enum_values=tuple(k.names if k.ctype == T.ENUM else None for k in kinds),
        set_values=tuple(k.names if k.ctype == T.SET else None for k in kinds),
    )


KEY = Kind(T.LONG, 0, "int", "int", width=4)
OPTIONS = parse_options({"path": "/nonexistent", "tables": "d.t"})


def scan_spec(definition: TableDef) -> ScanSpec:
    columns = read_spec("d.t", definition, (), ()).columns
    return ScanSpec("d.t", OPTIONS, 0, 0, columns, ("c0",), (), 1)


def norm(table: pa.Table) -> list[Any]:
    """Every value, floats by their bits (NaN equal to itself)."""
    out = []
    for column in table.columns:
        values = column.to_pylist()
        if pa.types.is_floating(column.type):
            values = [None if v is None else struct.pack("<d", v) for v in values]
        out.append(values)
    return out


def routes(
    image_kinds: list[Kind], definition_kinds: list[Kind], images: list[bytes], lead: bytes
) -> tuple[pa.Table, pa.Table | None, Any]:
    """(Python route's table, C route's table or None when it declined, the C plan)."""
    tm = table_map([KEY, *image_kinds])
    columns = [KEY.column("c0"), *(k.column(f"c{i + 1}") for i, k in enumerate(definition_kinds))]
    spec = scan_spec(TableDef("d", "t", tuple(columns), ("c0",)))
    table = _Table(spec, tm, None)
    present = tuple(range(len(image_kinds) + 1))
    shape = table.shape(present)
    buf = lead + b"".join(images)
    offsets, at = [], len(lead)
    for one in images:
        offsets.append(at)
        at += len(one)
    python = RowDecoder(tm, native=False)
    out = _Columns(spec)
    out.add([python.decode_image(buf, off, present)[0] for off in offsets], shape.where)
    expected = out.table()
    targets = _targets(spec)
    plan = None if targets is None else table.survivor_plan(shape, targets)
    if targets is None or plan is None:
        return expected, None, plan
    builder = Columns(targets)
    done = builder.add(plan, buf, np.array(offsets, dtype=np.int64))
    got = _arrow_table(spec, builder.take()) if done else None
    assert builder.rows == 0
    return expected, got, plan


@st.composite
def case(draw: st.DrawFn) -> tuple[list[Kind], list[Kind], list[bytes], bytes]:
    fast_only = draw(st.integers(0, 3)) > 0
    pool = FAST if fast_only else KINDS
    image_kinds = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=8))
    # the definition at the point: mostly the image's, sometimes another type (an ALTER)
    definition_kinds = [
        draw(st.sampled_from(FAST)) if draw(st.integers(0, 7)) == 0 else k for k in image_kinds
    ]
    images = []
    for _ in range(draw(st.integers(1, 6))):
        key = draw(st.integers(-(2**31), 2**31 - 1)).to_bytes(4, "little", signed=True)
        vals = [None if draw(st.integers(0, 5)) == 0 else draw(value(k)) for k in image_kinds]
        images.append(image([key, *vals]))
    return image_kinds, definition_kinds, images, draw(st.binary(max_size=3))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_c_survivors_equal_the_python_route(
    spec: tuple[list[Kind], list[Kind], list[bytes], bytes],
) -> None:
    expected, got, _plan = routes(*spec)
    if got is None:
        return  # declined: the walker decodes these images the Python way
    assert got.schema == expected.schema
    for name in expected.column_names:
        if name.startswith("_t"):
            assert expected[name].null_count == expected.num_rows, name  # typed in Python too
    assert norm(got) == norm(expected)


def test_common_types_take_the_c_route() -> None:
    """Valid values of every type the read types come out of C, NULLs included."""
    kinds = list(FAST)
    images = []
    for row in range(3):
        vals: list[bytes | None] = []
        for i, k in enumerate(kinds):
            if (row + i) % 3 == 0:
                vals.append(None)
            elif k.ctype == T.NEWDECIMAL:
                p, s = k.meta >> 8, k.meta & 0xFF
                vals.append(enc_decimal("-" + "9" * (p - s) + ("." + "1" * s if s else ""), p, s))
            elif k.ctype in (T.VARCHAR, T.STRING, T.BLOB):
                data = {"latin1": "caf\xe9".encode("latin-1"), "ascii": b"plain"}.get(
                    k.charset or "", "h\u00e9\U0001f600".encode()
                )
                prefix = k.meta if k.ctype == T.BLOB else 1 if k.ctype == T.STRING else (
                    1 if k.meta < 256 else 2
                )  # fmt: skip
                vals.append(enc_prefixed(data, prefix))
            elif k.ctype == T.FLOAT:
                vals.append(struct.pack("<f", -1.5))
            elif k.ctype == T.DOUBLE:
                vals.append(struct.pack("<d", 2.25e300))
            elif k.ctype == T.YEAR:
                vals.append(bytes([row * 60]))
            else:
                top = 2 ** (k.width * 8 - (0 if k.unsigned else 1)) - 1
                vals.append(top.to_bytes(k.width, "little", signed=not k.unsigned))
        images.append(image([row.to_bytes(4, "little"), *vals]))
    expected, got, plan = routes(kinds, kinds, images, b"\x07")
    assert plan is not None and got is not None
    assert norm(got) == norm(expected)
    assert got.num_rows == 3 and got["_v1"].null_count == 1
    assert got.column(got.column_names.index("_v0")).to_pylist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        (KEY, b"\xff\xff\xff\x7f"),  # fits: taken
        (Kind(T.LONG, 0, "int", "int unsigned", unsigned=True, width=4), b"\xff\xff\xff\xff"),
        (_text(T.VARCHAR, 200, "varchar", "varchar(50)", "utf8mb4"), b"\x02\xc3\x28"),
        (_text(T.VARCHAR, 200, "varchar", "varchar(50)", "ascii"), b"\x01\x80"),
    ],
)
def test_values_out_of_the_typed_range_fall_back(kind: Kind, data: bytes) -> None:
    """An unsigned INT above int32 under an INT definition (an ALTER), text invalid in its
    charset: the C route declines, the Python route gives the text for the JVM."""
    definition = KEY if kind.data_type == "int" else kind
    expected, got, _plan = routes([kind], [definition], [image([b"\0\0\0\0", data])], b"")
    if data == b"\xff\xff\xff\x7f":
        assert got is not None and got["_v1"].to_pylist() == [2**31 - 1]
        return
    assert got is None
    assert expected["_t1"].null_count == 0


def test_a_truncated_image_is_an_error() -> None:
    tm = table_map([KEY, FAST[0]])
    spec = scan_spec(TableDef("d", "t", (KEY.column("c0"), FAST[0].column("c1")), ("c0",)))
    table = _Table(spec, tm, None)
    shape = table.shape((0, 1))
    targets = _targets(spec)
    assert targets is not None
    plan = table.survivor_plan(shape, targets)
    builder = Columns(targets)
    with pytest.raises(ValueError, match="runs past the end"):
        builder.add(plan, b"\x00\x01\x00", np.array([0], dtype=np.int64))
    assert builder.rows == 0
