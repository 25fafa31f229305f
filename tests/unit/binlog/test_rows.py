"""Rows events: v1/v2 layouts, update pairs, extra data, PARTIAL_UPDATE_ROWS, MariaDB
compressed rows, names for dicts, and typed errors on bad bytes."""

from __future__ import annotations

import zlib

import pytest
from _binlog_encode import (
    enc_int,
    enc_json,
    enc_prefixed,
    image,
    packed_int,
    rows_body,
)

from headwater.binlog.codec import ColumnDef, PartialJson
from headwater.binlog.constants import ColumnType as T, EventType as E
from headwater.binlog.rows import parse_rows_event, rows_event_table_id
from headwater.binlog.tablemap import TableMap
from headwater.errors import BinlogFormatError, TruncatedError

TM = TableMap(
    table_id=77,
    flags=0,
    schema="shop",
    table="items",
    column_types=(T.LONG, T.VARCHAR, T.JSON),
    column_meta=(0, 40, 4),
    nullable=(False, True, True),
)
NAMED = TableMap(
    **{
        **{f: getattr(TM, f) for f in TM.__slots__},  # type: ignore[attr-defined]
        "column_names": ("id", "name", "doc"),
    }
)


def row(i: int, name: str | None, doc: object = None) -> bytes:
    return image(
        [
            enc_int(i, 4),
            None if name is None else enc_prefixed(name.encode(), 1),
            None if doc is None else enc_prefixed(enc_json(doc), 4),
        ]
    )


def test_table_id_peek() -> None:
    assert rows_event_table_id(rows_body(0x010203040506, 3, b"")) == 0x010203040506
    assert rows_event_table_id(rows_body(5, 3, b"")[:4] + b"\0\0", table_id_size=4) == 5
    with pytest.raises(TruncatedError):
        rows_event_table_id(b"\x01\x02")


@pytest.mark.parametrize(("code", "v2"), [(E.WRITE_ROWS_V1, False), (E.WRITE_ROWS, True)])
def test_insert_v1_and_v2(code: int, v2: bool) -> None:
    body = rows_body(77, 3, row(1, "a", {"k": 1}) + row(2, None), v2=v2, flags=1)
    ev = parse_rows_event(code, body, table_map=TM)
    assert (ev.kind, ev.table_id, ev.flags, ev.width) == ("insert", 77, 1, 3)
    assert ev.is_statement_end
    assert (ev.columns_before, ev.columns_after) == ((), (0, 1, 2))
    assert ev.rows == [(1, "a", '{"k": 1}'), (2, None, None)]


@pytest.mark.parametrize(("code", "v2"), [(E.DELETE_ROWS_V1, False), (E.DELETE_ROWS, True)])
def test_delete_minimal_image(code: int, v2: bool) -> None:
    body = rows_body(77, 3, image([enc_int(9, 4)]), present=[0], v2=v2, flags=0)
    ev = parse_rows_event(code, body, table_map=TM)
    assert (ev.kind, ev.columns_before, ev.columns_after, ev.rows) == ("delete", (0,), (), [(9,)])
    assert not ev.is_statement_end


@pytest.mark.parametrize(("code", "v2"), [(E.UPDATE_ROWS_V1, False), (E.UPDATE_ROWS, True)])
def test_update_before_and_after_bitmaps(code: int, v2: bool) -> None:
    rows = image([enc_int(1, 4)]) + image([enc_int(1, 4), enc_prefixed(b"new", 1)])
    body = rows_body(77, 3, rows, present=[0], present_after=[0, 1], v2=v2, update=True)
    ev = parse_rows_event(code, body, table_map=TM)
    assert (ev.columns_before, ev.columns_after) == ((0,), (0, 1))
    assert ev.rows == [((1,), (1, "new"))]


def test_as_dicts_names_from_metadata_schema_history_or_position() -> None:
    rows = image([enc_int(1, 4)]) + image([enc_int(1, 4), enc_prefixed(b"new", 1)])
    body = rows_body(77, 3, rows, present=[0], present_after=[0, 1], update=True)
    assert parse_rows_event(E.UPDATE_ROWS, body, table_map=NAMED).as_dicts() == [
        ({"id": 1}, {"id": 1, "name": "new"})
    ]
    ev = parse_rows_event(E.UPDATE_ROWS, body, table_map=TM)
    assert ev.as_dicts() == [({"@1": 1}, {"@1": 1, "@2": "new"})]
    cols = [ColumnDef("a"), ColumnDef("b"), ColumnDef("c")]
    assert ev.as_dicts(cols) == [({"a": 1}, {"a": 1, "b": "new"})]
    insert = parse_rows_event(E.WRITE_ROWS, rows_body(77, 3, row(3, "x")), table_map=NAMED)
    assert insert.as_dicts() == [{"id": 3, "name": "x", "doc": None}]


def test_empty_rows_event() -> None:
    ev = parse_rows_event(E.WRITE_ROWS, rows_body(77, 3, b""), table_map=TM)
    assert ev.rows == []


def test_v2_extra_data_partition_info() -> None:
    # ROWS_V_TAG_PART_INFO (1): u16 partition id; updates add the source partition id.
    body = rows_body(77, 3, row(1, "a"), extra=b"\x01\x05\x00")
    ev = parse_rows_event(E.WRITE_ROWS, body, table_map=TM)
    assert (ev.extra_data, ev.extra_info) == (b"\x01\x05\x00", {"partition_id": 5})
    upd = rows_body(77, 3, row(1, "a") + row(1, "b"), update=True, extra=b"\x01\x02\x00\x03\x00")
    assert parse_rows_event(E.UPDATE_ROWS, upd, table_map=TM).extra_info == {
        "partition_id": 2,
        "source_partition_id": 3,
    }


def test_v2_extra_data_ndb_info_and_unknown_tag() -> None:
    # ROWS_V_EXTRAINFO_TAG (0): length (counting length and format bytes), format, data.
    ndb = b"\x00\x04\x00\xab\xcd"
    ev = parse_rows_event(E.WRITE_ROWS, rows_body(77, 3, row(1, "a"), extra=ndb), table_map=TM)
    assert ev.extra_info == {"ndb_info": b"\x04\x00\xab\xcd"}
    ev = parse_rows_event(
        E.WRITE_ROWS, rows_body(77, 3, row(1, "a"), extra=b"\x09zz"), table_map=TM
    )
    assert (ev.extra_data, ev.extra_info, ev.rows) == (b"\x09zz", {}, [(1, "a", None)])


def _compressed(body_head: bytes, rows: bytes, lenlen: int = 2) -> bytes:
    return (
        body_head + bytes([0x80 | lenlen]) + len(rows).to_bytes(lenlen, "big") + zlib.compress(rows)
    )


@pytest.mark.parametrize(
    ("code", "v2"), [(E.WRITE_ROWS_COMPRESSED_V1, False), (E.WRITE_ROWS_COMPRESSED, True)]
)
def test_mariadb_compressed_insert(code: int, v2: bool) -> None:
    rows = row(1, "a") + row(2, "b", [1, 2])
    for lenlen in (1, 2, 3, 4):
        body = _compressed(rows_body(77, 3, b"", v2=v2), rows, lenlen)
        ev = parse_rows_event(code, body, table_map=TM)
        assert ev.rows == [(1, "a", None), (2, "b", "[1, 2]")]


def test_mariadb_compressed_update_and_delete() -> None:
    rows = row(1, "a") + row(1, "b")
    body = _compressed(rows_body(77, 3, b"", v2=False, update=True), rows)
    ev = parse_rows_event(E.UPDATE_ROWS_COMPRESSED_V1, body, table_map=TM)
    assert ev.rows == [((1, "a", None), (1, "b", None))]
    body = _compressed(rows_body(77, 3, b"", v2=False), row(4, None))
    assert parse_rows_event(E.DELETE_ROWS_COMPRESSED_V1, body, table_map=TM).rows == [
        (4, None, None)
    ]


def test_mariadb_compressed_bad_header_or_stream() -> None:
    head = rows_body(77, 3, b"", v2=False)
    with pytest.raises(BinlogFormatError, match="header"):
        parse_rows_event(E.WRITE_ROWS_COMPRESSED_V1, head + b"\x10\x01x", table_map=TM)
    with pytest.raises(BinlogFormatError, match="inflate"):
        parse_rows_event(E.WRITE_ROWS_COMPRESSED_V1, head + b"\x81\x05notzlib", table_map=TM)
    wrong_size = head + b"\x81\x09" + zlib.compress(row(1, "a"))
    with pytest.raises(BinlogFormatError):
        parse_rows_event(E.WRITE_ROWS_COMPRESSED_V1, wrong_size, table_map=TM)


def _diff_vector(*diffs: tuple[int, str, object]) -> bytes:
    """Json_diff_vector::write_binary: u32 length, then op, path, [value] per diff."""
    out = b""
    for op, path, value in diffs:
        out += bytes([op]) + packed_int(len(path)) + path.encode()
        if op != 2:
            raw = enc_json(value)
            out += packed_int(len(raw)) + raw
    return len(out).to_bytes(4, "little") + out


def test_partial_update_rows_applies_json_diffs() -> None:
    before = row(1, "a", {"age": 24, "name": "Joe"})
    # after image: value_options=1 (PARTIAL_JSON_UPDATES), partial_bits (1 JSON column: set)
    after = (
        packed_int(1)
        + b"\x01"
        + image([enc_int(1, 4), enc_prefixed(b"a", 1), _diff_vector((0, "$.age", 25))])
    )
    # second row: value_options=0 -> a plain after image
    before2 = row(2, "b", {"x": 1})
    after2 = packed_int(0) + row(2, "b", {"x": 2})
    body = rows_body(77, 3, before + after + before2 + after2, update=True)
    ev = parse_rows_event(E.PARTIAL_UPDATE_ROWS, body, table_map=TM)
    assert ev.is_partial_update
    assert ev.rows == [
        ((1, "a", '{"age": 24, "name": "Joe"}'), (1, "a", '{"age": 25, "name": "Joe"}')),
        ((2, "b", '{"x": 1}'), (2, "b", '{"x": 2}')),
    ]


def test_partial_update_without_before_value_keeps_the_diffs() -> None:
    before = image([enc_int(1, 4)])
    after = packed_int(1) + b"\x01" + image([_diff_vector((2, "$.gone", None))])
    body = rows_body(77, 3, before + after, present=[0], present_after=[2], update=True)
    ((b, (value,)),) = parse_rows_event(E.PARTIAL_UPDATE_ROWS, body, table_map=TM).rows
    assert b == (1,)
    assert isinstance(value, PartialJson)
    assert [(d.operation, d.path, d.value) for d in value.diffs] == [(2, "$.gone", None)]


def test_pre_ga_rows_events_are_refused() -> None:
    with pytest.raises(BinlogFormatError, match="pre-GA") as info:
        parse_rows_event(E.PRE_GA_WRITE_ROWS, rows_body(77, 3, b"", v2=False), table_map=TM)
    assert info.value.event_type == "PRE_GA_WRITE_ROWS"


def test_mismatched_table_map_is_refused() -> None:
    with pytest.raises(BinlogFormatError, match="table id"):
        parse_rows_event(E.WRITE_ROWS, rows_body(78, 3, row(1, "a")), table_map=TM)
    with pytest.raises(BinlogFormatError, match="columns"):
        parse_rows_event(
            E.WRITE_ROWS, rows_body(77, 2, b"\0" + enc_int(1, 4) + b"\1a"), table_map=TM
        )


def test_not_a_rows_event() -> None:
    with pytest.raises(BinlogFormatError):
        parse_rows_event(E.QUERY, rows_body(77, 3, b""), table_map=TM)


def test_every_truncation_is_a_typed_error() -> None:
    body = rows_body(77, 3, row(1, "abc", {"k": [1, 2, 3]}) + row(2, "de", [True]))
    whole = parse_rows_event(E.WRITE_ROWS, body, table_map=TM)
    assert len(whole.rows) == 2
    row_start = len(rows_body(77, 3, b""))
    boundary = row_start + len(row(1, "abc", {"k": [1, 2, 3]}))
    for cut in range(len(body)):
        if cut in (row_start, boundary):
            continue  # a whole number of rows: a valid (shorter) event
        with pytest.raises(TruncatedError) as info:
            parse_rows_event(E.WRITE_ROWS, body[:cut], table_map=TM)
        assert info.value.event_type == "WRITE_ROWS"


def test_garbage_after_bitmaps_never_escapes_untyped() -> None:
    head = rows_body(77, 3, b"")
    # A null bitmap with every bit set is a whole row on its own (the server writes a bit for
    # NOT NULL columns too); everything else here ends inside a row.
    assert parse_rows_event(E.WRITE_ROWS, head + b"\x07", table_map=TM).rows == [(None, None, None)]
    for tail in (b"\x00", b"\x00\xff\xff\xff\xff", b"\x00\x01\x00\x00\x00\x05ab"):
        with pytest.raises(BinlogFormatError):
            parse_rows_event(E.WRITE_ROWS, head + tail, table_map=TM)
