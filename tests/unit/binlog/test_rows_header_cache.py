"""Rows events that repeat a header reuse its parsed layout (rows._LAYOUTS): the events of a
statement decode as the first did, and a header that differs in anything the layout reads
(flags, extra data, bitmaps, table id, width, event type) is parsed and checked again."""

from __future__ import annotations

import pytest
from _binlog_encode import enc_int, enc_prefixed, image, rows_body

from headwater.binlog.constants import ColumnType as T, EventType as E
from headwater.binlog.rows import _LAST, _LAYOUTS, parse_rows_event
from headwater.binlog.tablemap import TableMap
from headwater.errors import BinlogFormatError

TM = TableMap(
    table_id=91,
    flags=0,
    schema="shop",
    table="orders",
    column_types=(T.LONG, T.VARCHAR),
    column_meta=(0, 40),
    nullable=(False, True),
    charsets=(None, 255),
)


def row(i: int, name: str | None) -> bytes:
    return image([enc_int(i, 4), None if name is None else enc_prefixed(name.encode(), 1)])


@pytest.mark.parametrize(("code", "v2"), [(E.WRITE_ROWS_V1, False), (E.WRITE_ROWS, True)])
def test_repeated_headers_decode_like_the_first(code: int, v2: bool) -> None:
    _LAYOUTS.clear()
    first = parse_rows_event(code, rows_body(91, 2, row(1, "a"), v2=v2, flags=0), table_map=TM)
    assert len(_LAYOUTS) == 1
    again = parse_rows_event(code, rows_body(91, 2, row(2, None), v2=v2, flags=0), table_map=TM)
    assert len(_LAYOUTS) == 1  # the same header: reused
    assert (first.rows, again.rows) == ([(1, "a")], [(2, None)])
    assert (again.flags, again.columns_after, again.width) == (0, (0, 1), 2)
    last = parse_rows_event(code, rows_body(91, 2, row(3, "c"), v2=v2, flags=1), table_map=TM)
    assert last.is_statement_end and last.rows == [(3, "c")]  # flags differ: parsed again
    assert len(_LAYOUTS) == 2


def test_headers_that_differ_are_parsed_and_checked_again() -> None:
    _LAYOUTS.clear()
    body = rows_body(91, 2, row(1, "a"), extra=b"\x01\x07\x00")
    assert parse_rows_event(E.WRITE_ROWS, body, table_map=TM).extra_info == {"partition_id": 7}
    minimal = rows_body(91, 2, image([enc_int(5, 4)]), present=[0])
    assert parse_rows_event(E.WRITE_ROWS, minimal, table_map=TM).columns_after == (0,)
    delete = parse_rows_event(E.DELETE_ROWS, minimal, table_map=TM)
    assert (delete.kind, delete.columns_before, delete.rows) == ("delete", (0,), [(5,)])
    with pytest.raises(BinlogFormatError, match="table id"):
        parse_rows_event(E.WRITE_ROWS, rows_body(92, 2, row(1, "a")), table_map=TM)
    with pytest.raises(BinlogFormatError, match="columns"):
        parse_rows_event(E.WRITE_ROWS, rows_body(91, 3, row(1, "a")), table_map=TM)
    other = TableMap(**{**{f: getattr(TM, f) for f in TM.__slots__}, "table_id": 92})  # type: ignore[attr-defined]
    assert parse_rows_event(E.WRITE_ROWS, rows_body(92, 2, row(4, "d")), table_map=other).rows == [
        (4, "d")
    ]
    with pytest.raises(BinlogFormatError, match="TABLE_MAP of 92"):
        parse_rows_event(E.WRITE_ROWS, rows_body(91, 2, row(1, "a")), table_map=other)


def test_the_last_header_answers_the_next_event_of_its_statement() -> None:
    _LAYOUTS.clear()
    _LAST[0] = (None, 0, 0, b"", None)
    body = rows_body(91, 2, row(1, "a"), flags=0)
    assert parse_rows_event(E.WRITE_ROWS, body, table_map=TM).rows == [(1, "a")]
    _LAYOUTS.clear()  # only the last-header memo can answer now
    again = parse_rows_event(E.WRITE_ROWS, rows_body(91, 2, row(2, None), flags=0), table_map=TM)
    assert (again.rows, again.columns_after, len(_LAYOUTS)) == ([(2, None)], (0, 1), 0)
    # The same bytes under another type code, or with another (equal) TABLE_MAP object,
    # are parsed again.
    delete = parse_rows_event(E.DELETE_ROWS, body, table_map=TM)
    assert (delete.kind, delete.columns_before, delete.rows) == ("delete", (0, 1), [(1, "a")])
    twin = TableMap(**{f: getattr(TM, f) for f in TM.__slots__})  # type: ignore[attr-defined]
    assert parse_rows_event(E.WRITE_ROWS, body, table_map=twin).rows == [(1, "a")]
    assert _LAST[0][0] is twin
    # Other extra data: another header, parsed again.
    extra = rows_body(91, 2, row(3, "c"), extra=b"\x01\x07\x00")
    assert parse_rows_event(E.WRITE_ROWS, extra, table_map=twin).extra_info == {"partition_id": 7}
