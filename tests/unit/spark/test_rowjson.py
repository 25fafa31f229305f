"""The JSON images rendered straight from rows events' bytes against the decoded path.

``read_slice`` keeps the rows of a rows event as its bytes where every column is of a kind
``headwater._native._imagejson.render_raw`` writes (``ChangeBlock.raw``), and renders the
``key``/``before``/``after``/``before_key`` columns from them; the reference is today's
path: the rows decoded to value tuples (``_rowimage``) and rendered by ``render_block``.
Random tables of every column kind the row decoders read (``_rowimage``'s differential
test's strategies: integers of each width, FLOAT, DOUBLE, DECIMAL of any precision and
scale, YEAR, DATE, TIMESTAMP, DATETIME2/TIMESTAMP2/TIME2 of each fsp, BIT, ENUM, SET,
CHAR/BINARY/VARCHAR/BLOB/TEXT/GEOMETRY in utf8, utf8mb4, latin1, ascii and binary) with
random rows (valid encodings, random bytes of the right width, extreme integers, NULLs,
empty strings, escapes, unicode, invalid text bytes) built in the MySQL row format
(``_binlog_encode``): both must append the same text byte for byte. Where ``render_raw``
declines (invalid text, a DECIMAL group above its digits, a DATETIME2 below year 0, bytes
that do not frame, a float key column of an update, names that are not distinct) it
appends nothing, and the block's output is still the decoded path's.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings, strategies as st

from headwater._native._imagejson import JsonColumns, RowShape, render_raw
from headwater.binlog.codec import ColumnDef, RowDecoder
from headwater.binlog.constants import EVENT_HEADER, EVENT_HEADER_SIZE, ColumnType as T, EventType
from headwater.changes import ChangeBlock, RawRows, decode_blocks, encode_events
from headwater.position import Position
from headwater.spark import partitions
from headwater.spark.partitions import _arrow, _block_picks, _images, _key_from_before

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "binlog"))
from _binlog_encode import (
    enc_date,
    enc_datetime2,
    enc_decimal,
    enc_int,
    enc_prefixed,
    enc_time2,
    enc_timestamp2,
    image,
    rows_body,
    table_map_body,
)
from test_rowimage_differential import Column, _string_meta, column, table, value

#: Column names: plain, quoted, escapes, non-ASCII, one that does not encode (surrogate).
NAMES = ("id", "a", 'q"uote', "back\\slash", "caf\u00e9", "\U0001f600", "\udcff", "tab\t")

#: Integer columns' extreme values (min, max, -1, 0 of each width).
INT_WIDTHS = {T.TINY: 1, T.SHORT: 2, T.INT24: 3, T.LONG: 4, T.LONGLONG: 8}


@st.composite
def cell(draw: st.DrawFn, col: Column) -> bytes | None:
    """One value of ``col`` as the server packs it, or None (NULL)."""
    if draw(st.integers(0, 5)) == 0:
        return None
    t = col[0]
    if t in INT_WIDTHS and draw(st.booleans()):
        bits = 8 * INT_WIDTHS[t]
        lo, hi = (0, 2**bits - 1) if col[2] else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        return enc_int(
            draw(st.sampled_from((lo, hi, 0, min(hi, 1), max(lo, -1)))), bits // 8, col[2]
        )
    if t in (T.STRING, T.VARCHAR, T.BLOB) and draw(st.booleans()):
        text = draw(st.sampled_from(("", '"', "\\", "\x00\x1f\x7f", "\b\f\n\r\t", "caf\u00e9",
                                     "\u2028", "\U0001f600", "</script>")))  # fmt: skip
        data = text.encode("latin1" if col[3] == 8 and text.isascii() is False else "utf-8",
                           "replace")  # fmt: skip
        if t == T.STRING and col[3] == 63:
            data = data.rstrip(b"\0")
        return enc_prefixed(data, _prefix(col))
    return draw(value(col))


def _prefix(col: Column) -> int:
    t, meta = col[0], col[1]
    if t == T.STRING:
        b0, b1 = meta >> 8, meta & 0xFF
        length = b1 | (((b0 & 0x30) ^ 0x30) << 4) if (b0 & 0x30) != 0x30 else b1
        return 1 if length < 256 else 2
    if t == T.VARCHAR:
        return 1 if meta < 256 else 2
    return meta


Case = tuple[list[Column], str, tuple[int, ...], tuple[int, ...], list[bytes], list[str], Any]


@st.composite
def case(draw: st.DrawFn) -> Case:
    cols = draw(st.lists(column(), min_size=1, max_size=8))
    n = len(cols)
    op = draw(st.sampled_from(("insert", "update", "delete")))
    full = tuple(range(n))
    subset = st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True).map(
        lambda xs: tuple(sorted(xs))
    )
    first = draw(st.just(full) | subset)
    second = draw(st.just(full) | subset) if op == "update" else ()
    names = draw(st.lists(st.sampled_from(NAMES), min_size=n, max_size=n, unique=True))
    key = draw(
        st.none()
        | st.just(())
        | st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True).map(tuple)
    )
    images: list[bytes] = []
    for _ in range(draw(st.integers(1, 4))):
        before = [draw(cell(cols[i])) for i in first]
        images.append(image(before))
        if op == "update":
            after = [draw(cell(cols[i])) for i in second]
            if draw(st.booleans()):  # the same key columns' bytes before and after
                for j, i in enumerate(second):
                    if i in first:
                        after[j] = before[first.index(i)]
            images.append(image(after))
    return cols, op, first, second, images, names, key


def blocks(spec: Case) -> tuple[ChangeBlock, ChangeBlock | None, int]:
    """The rows event's block decoded (today's path), and kept as bytes (None when its
    images have a kind render_raw does not write); and the number of rows."""
    cols, op, first, second, images, names, key = spec
    dec = RowDecoder(table(cols))
    update = op == "update"
    head = rows_body(1, len(cols), b"", first, second or None, update=update)
    body = head + b"".join(images)
    at, end = len(head), len(body)
    rows: list[Any] = (
        dec.decode_row_pairs(body, at, end, first, second)
        if update
        else dec.decode_rows(body, at, end, first)
    )
    before = [names[i] for i in first] if op != "insert" else []
    after = [names[i] for i in (second if update else first)] if op != "delete" else []
    args = ("db", "t", op, Position(1, 1, 4, 0), 0)
    decoded = ChangeBlock(*args, rows, before, after, key)
    b_present, a_present = (
        (first, second) if update else ((), first) if op == "insert" else (first, ())
    )
    shapes = (dec.json_shape(b_present) if b_present else None,
              dec.json_shape(a_present) if a_present else None)  # fmt: skip
    if (update and None in shapes) or (not update and shapes == (None, None)):
        return decoded, None, len(rows)
    count = dec.count_rows(body, at, end, first, second if update else None)
    raw = RawRows(dec, body, at, end, first, second, update, count, shapes)
    return decoded, ChangeBlock(*args, [], before, after, key, None, raw), len(rows)


def rendered(block: ChangeBlock, lo: int, hi: int) -> Any:
    out = JsonColumns()
    out.append(0, "k0")  # appended to, not replaced
    out.append(2, None)
    try:
        _images(block, lo, hi, out)
    except Exception as exc:  # both paths must fail alike
        return type(exc), None
    return "ok", [column.to_pylist() for column in _arrow(out)]


def direct(block: ChangeBlock, lo: int, hi: int) -> tuple[bool, Any]:
    """render_raw itself: whether it took the rows, and the columns."""
    raw = block.raw
    assert raw is not None
    out = JsonColumns()
    out.append(0, "k0")
    out.append(2, None)
    picks, old = _block_picks(block)
    took = render_raw(
        block.op, raw.shapes[0], raw.shapes[1], raw.body, raw.at, raw.end, lo, hi,
        block.before_names, block.after_names, picks, old, out,
    )  # fmt: skip
    return took, ["ok", [column.to_pylist() for column in _arrow(out)]]


UNTOUCHED = ["ok", [["k0"], [], [None], []]]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case(), st.data())
def test_images_from_bytes_equal_the_decoded_images(spec: Case, data: st.DataObject) -> None:
    decoded, raw, n = blocks(spec)
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo + 1, n))
    want = rendered(decoded, lo, hi)
    if raw is None:
        event("a kind render_raw does not write")
        return
    if _key_from_before(decoded):
        # an update's key partly in the before image only: _images renders it in Python
        # (tests/unit/spark/test_minimal_key.py), render_raw is not asked
        event("the key from the before image")
        assert rendered(raw, lo, hi) == want
        return
    took, got = direct(raw, lo, hi)
    event(f"render_raw took the rows: {took}")
    # Taken: the very text of the decoded path; declined: nothing appended.
    assert got == (list(want) if took else UNTOUCHED)
    assert rendered(raw, lo, hi) == want  # through _images: render_raw or the fallback


def one_row_table(cols: list[Column], values: list[bytes | None], op: str = "insert") -> Case:
    first = tuple(range(len(cols)))
    names = [f"c{i}" for i in range(len(cols))]
    images = [image(values), image(values)] if op == "update" else [image(values)]
    return cols, op, first, first if op == "update" else (), images, names, ("c0",)


def _col(t: int, meta: int = 0, unsigned: bool = False, collation: int | None = None) -> Column:
    return (t, meta, unsigned, collation, None, None)


EVERY_KIND: list[tuple[Column, bytes]] = [
    ((T.TINY, 0, False, None, None, None), enc_int(-128, 1)),
    ((T.TINY, 0, True, None, None, None), enc_int(255, 1, True)),
    ((T.SHORT, 0, False, None, None, None), enc_int(-32768, 2)),
    ((T.INT24, 0, False, None, None, None), enc_int(-8388608, 3)),
    ((T.INT24, 0, True, None, None, None), enc_int(16777215, 3, True)),
    ((T.LONG, 0, False, None, None, None), enc_int(-(2**31), 4)),
    ((T.LONGLONG, 0, False, None, None, None), enc_int(-(2**63), 8)),
    ((T.LONGLONG, 0, True, None, None, None), enc_int(2**64 - 1, 8, True)),
    ((T.FLOAT, 4, False, None, None, None), bytes.fromhex("0000c03f")),
    ((T.DOUBLE, 8, False, None, None, None), bytes.fromhex("000000000000f07f")),  # inf: null
    ((T.NEWDECIMAL, 10 << 8 | 2, False, None, None, None), enc_decimal("-12345678.90", 10, 2)),
    (_col(T.NEWDECIMAL, 65 << 8 | 30), enc_decimal("-0." + "0" * 29 + "1", 65, 30)),
    ((T.NEWDECIMAL, 5 << 8 | 5, False, None, None, None), enc_decimal("0.00000", 5, 5)),
    (_col(T.NEWDECIMAL, 18 << 8 | 0), enc_decimal("-000000000000000007", 18, 0)),
    ((T.YEAR, 0, False, None, None, None), bytes([126])),
    ((T.DATE, 0, False, None, None, None), enc_date(2024, 2, 29)),
    ((T.DATE, 0, False, None, None, None), enc_date(2023, 2, 30)),  # not a date: its text
    ((T.DATETIME2, 6, False, None, None, None), enc_datetime2(9999, 12, 31, 23, 59, 59, 999999, 6)),
    ((T.DATETIME2, 3, False, None, None, None), enc_datetime2(2020, 0, 0, 0, 0, 0, 0, 3)),
    ((T.TIMESTAMP2, 3, False, None, None, None), enc_timestamp2(1700000000, 123000, 3)),
    ((T.TIMESTAMP2, 6, False, None, None, None), enc_timestamp2(0, 0, 6)),  # zero: its text
    ((T.TIMESTAMP, 0, False, None, None, None), enc_int(2**32 - 1, 4, True)),
    (_col(T.TIME2, 4), enc_time2(-timedelta(hours=838, seconds=59, microseconds=100), 4)),
    ((T.BIT, 8 << 8, False, None, None, None), b"\xff" * 8),
    ((T.VARCHAR, 400, False, 45, None, None), enc_prefixed('a"\\\n\U0001f600'.encode(), 2)),
    ((T.VARCHAR, 40, False, 8, None, None), enc_prefixed(b"caf\xe9\x01\x80", 1)),
    ((T.VARCHAR, 40, False, 11, None, None), enc_prefixed(b"", 1)),
    ((T.STRING, _string_meta(4), False, 63, None, None), enc_prefixed(b"a", 1)),  # BINARY(4)
    ((T.BLOB, 2, False, 63, None, None), enc_prefixed(b"\x00\xff\x10", 2)),
]  # fmt: skip


def test_every_covered_kind_renders_from_bytes() -> None:
    cols = [c for c, _ in EVERY_KIND]
    for op in ("insert", "update", "delete"):
        for values in ([v for _, v in EVERY_KIND], [None] * len(cols)):
            decoded, raw, _n = blocks(one_row_table(cols, values, op))
            assert raw is not None
            took, got = direct(raw, 0, 1)
            assert took, op
            assert got == list(rendered(decoded, 0, 1))


def test_invalid_utf8_falls_back_to_the_decoded_images() -> None:
    # Bytes invalid in utf8mb4: the decoder keeps them as surrogate escapes, which render
    # as {"undecodable_text_base64": ...}; render_raw declines, _images decodes.
    cols: list[Column] = [
        (T.LONG, 0, False, None, None, None),
        (T.VARCHAR, 40, False, 45, None, None),
    ]
    decoded, raw, _n = blocks(one_row_table(cols, [enc_int(1, 4), enc_prefixed(b"x\xff", 1)]))
    assert raw is not None
    assert direct(raw, 0, 1) == (False, UNTOUCHED)
    want = rendered(decoded, 0, 1)
    assert "undecodable_text_base64" in want[1][2][1]
    assert rendered(raw, 0, 1) == want


def test_out_of_range_decimal_and_datetime_fall_back() -> None:
    for col, data in (
        ((T.NEWDECIMAL, 9 << 8 | 0, False, None, None, None), b"\xbb\x9a\xca\x00"),  # 999999999 + 1
        ((T.DATETIME2, 0, False, None, None, None), b"\x00" * 5),  # below year 0
    ):
        cols: list[Column] = [(T.LONG, 0, False, None, None, None), col]
        decoded, raw, _n = blocks(one_row_table(cols, [enc_int(1, 4), data]))
        assert raw is not None
        assert direct(raw, 0, 1) == (False, UNTOUCHED)
        assert rendered(raw, 0, 1) == rendered(decoded, 0, 1)


def test_truncated_rows_fall_back() -> None:
    cols: list[Column] = [
        (T.LONG, 0, False, None, None, None),
        (T.VARCHAR, 40, False, 45, None, None),
    ]
    _decoded, raw, _n = blocks(one_row_table(cols, [enc_int(1, 4), enc_prefixed(b"abc", 1)]))
    assert raw is not None and raw.raw is not None
    r = raw.raw
    out = JsonColumns()
    for end in range(r.at, r.end):  # every cut inside the row
        assert not render_raw("insert", None, r.shapes[1], r.body, r.at, end, 0, 1,
                              [], raw.after_names, [("c0", 0)], None, out)  # fmt: skip
    assert len(out) == 0
    # more rows asked than the bytes hold
    assert not render_raw("insert", None, r.shapes[1], r.body, r.at, r.end, 0, 2,
                          [], raw.after_names, [("c0", 0)], None, out)  # fmt: skip
    assert len(out) == 0


def test_a_float_key_of_an_update_falls_back() -> None:
    # before_key compares values: NaN != NaN although both render null.
    nan = bytes.fromhex("000000000000f87f")
    cols: list[Column] = [
        (T.DOUBLE, 8, False, None, None, None),
        (T.LONG, 0, False, None, None, None),
    ]
    decoded, raw, _n = blocks(one_row_table(cols, [nan, enc_int(1, 4)], "update"))
    assert raw is not None
    assert direct(raw, 0, 1) == (False, UNTOUCHED)
    want = rendered(decoded, 0, 1)
    assert want[1][3] == ['{"c0":null}']  # NaN != NaN: the key "changed"
    assert rendered(raw, 0, 1) == want


def test_kinds_not_rendered_from_bytes_have_no_shape() -> None:
    dec = RowDecoder(table([(T.ENUM, T.ENUM << 8 | 1, False, None, ("a",), None),
                            (T.LONG, 0, False, None, None, None)]))  # fmt: skip
    assert dec.json_shape((0, 1)) is None
    assert isinstance(dec.json_shape((1,)), RowShape)


def test_read_slice_renders_from_bytes() -> None:
    assert partitions._render_raw is render_raw


def _event(code: int, body: bytes) -> bytes:
    return EVENT_HEADER.pack(1, code, 1, EVENT_HEADER_SIZE + len(body), 0, 0) + body


def test_decode_blocks_keeps_rows_as_bytes_with_the_same_rows() -> None:
    # WRITE_ROWS then UPDATE_ROWS of an INT / VARCHAR(40) utf8mb4 / DECIMAL(10,2) table,
    # as bench/kafka.py's workload logs them; the second decode takes the plans.
    cols = (T.LONG, T.VARCHAR, T.NEWDECIMAL)
    metas = (b"", (40).to_bytes(2, "little"), bytes([10, 2]))
    # COLUMN_CHARSET (3): utf8mb4_general_ci (45) for the one string column
    tmap = table_map_body(7, "db", "t", cols, metas, optional=[(3, bytes([45]))])
    rows = [image([enc_int(i, 4), enc_prefixed(b"r%d" % i, 1), enc_decimal(f"{i}.5", 10, 2)])
            for i in range(3)]  # fmt: skip
    payload = encode_events(
        [
            _event(EventType.TABLE_MAP, tmap),
            _event(EventType.WRITE_ROWS, rows_body(7, 3, b"".join(rows), flags=0)),
            _event(EventType.UPDATE_ROWS, rows_body(7, 3, b"".join(rows[:2] * 2), update=True)),
        ]
    )
    record = SimpleNamespace(payload=payload, position=Position(1, 1, 4, 0), seq=1)
    decode_blocks(record, source="s", fde=None, raw=True)  # the table map parsed once
    raw = decode_blocks(record, source="s", fde=None, raw=True)
    decoded = decode_blocks(record, source="s", fde=None)
    assert [b.raw is not None for b in raw] == [True, True]
    assert [len(b) for b in raw] == [len(b) for b in decoded] == [3, 2]
    assert [b.materialize() for b in raw] == [b.rows for b in decoded]
    assert [b.raw for b in raw] == [None, None]


def test_latin1_columns_of_the_schema_history_render_from_bytes() -> None:
    # A column whose charset comes from the schema history as Python's iso8859-1 (the
    # "latin1" kind: every byte its own code point, 0x80-0x9f too, unlike mysql-latin1).
    cols: list[Column] = [_col(T.LONG), _col(T.VARCHAR, 400)]
    tm = table(cols)
    tm = dataclasses.replace(tm, charsets=None)
    dec = RowDecoder(tm, [ColumnDef("c0"), ColumnDef("c1", charset="iso8859-1")])
    assert dec._specs is not None and dec._specs[1] is not None and dec._specs[1][0] == "latin1"
    data = bytes(range(256))
    body = rows_body(1, 2, image([enc_int(5, 4), enc_prefixed(data, 2)]))
    at = len(rows_body(1, 2, b""))
    shape = dec.json_shape((0, 1))
    raw = RawRows(dec, body, at, len(body), (0, 1), (), False, 1, (None, shape))
    args = ("db", "t", "insert", Position(1, 1, 4, 0), 0)
    block = ChangeBlock(*args, [], [], ["c0", "c1"], ("c0",), None, raw)
    decoded = ChangeBlock(*args, raw.decode(), [], ["c0", "c1"], ("c0",))
    took, got = direct(block, 0, 1)
    assert took
    assert got == list(rendered(decoded, 0, 1))
    assert orjson.loads(got[1][2][1])["c1"] == data.decode("iso8859-1")
