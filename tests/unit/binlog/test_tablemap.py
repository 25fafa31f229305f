"""TABLE_MAP parsing: per-type metadata, every optional metadata field, bad bytes."""

from __future__ import annotations

import pytest
from _binlog_encode import packed_int, table_map_body

from headwater.binlog.constants import ColumnType as T
from headwater.binlog.tablemap import parse_table_map, read_packed_int
from headwater.errors import BinlogFormatError, TruncatedError


def _names(*names: str) -> bytes:
    return b"".join(packed_int(len(n)) + n.encode() for n in names)


def test_packed_int_all_widths() -> None:
    for n in (0, 250, 251, 65535, 65536, 1 << 24, (1 << 64) - 1):
        raw = packed_int(n) + b"x"
        assert read_packed_int(raw, 0, len(raw)) == (n, len(raw) - 1)


def test_packed_int_null_prefix_is_an_error() -> None:
    with pytest.raises(BinlogFormatError):
        read_packed_int(b"\xfb", 0, 1)


def test_names_ids_flags_and_nullability() -> None:
    body = table_map_body(
        0x0102030405,
        "shop",
        "orders",
        [T.LONG, T.VARCHAR],
        [b"", (300).to_bytes(2, "little")],
        [False, True],
        flags=3,
    )
    tm = parse_table_map(body)
    assert (tm.table_id, tm.flags, tm.schema, tm.table) == (0x0102030405, 3, "shop", "orders")
    assert tm.column_types == (T.LONG, T.VARCHAR)
    assert tm.column_meta == (0, 300)
    assert tm.nullable == (False, True)
    assert tm.signedness is None and tm.column_names is None and tm.charsets is None


def test_table_id_size_4() -> None:
    body = table_map_body(7, "d", "t", [T.TINY], [b""])
    short = body[:4] + body[6:]  # MySQL 5.1.0-5.1.15: 4-byte table id
    assert parse_table_map(short, table_id_size=4).table_id == 7


def test_per_type_metadata_decoding() -> None:
    types = [
        T.FLOAT,
        T.DOUBLE,
        T.BLOB,
        T.NEWDECIMAL,
        T.BIT,
        T.TIME2,
        T.DATETIME2,
        T.TIMESTAMP2,
        T.JSON,
        T.GEOMETRY,
        T.VAR_STRING,
        T.DATE,
        T.VECTOR,
    ]
    metas = [
        b"\x04",
        b"\x08",
        b"\x02",
        bytes([65, 30]),
        bytes([3, 2]),
        b"\x03",
        b"\x06",
        b"\x00",
        b"\x04",
        b"\x04",
        (765).to_bytes(2, "little"),
        b"",
        b"\x04",
    ]
    tm = parse_table_map(table_map_body(1, "d", "t", types, metas))
    assert tm.column_meta == (4, 8, 2, 65 << 8 | 30, 2 << 8 | 3, 3, 6, 0, 4, 4, 765, 0, 4)


def test_string_meta_reveals_enum_and_set() -> None:
    # Both servers write ENUM/SET as MYSQL_TYPE_STRING with the real type in meta byte 0.
    tm = parse_table_map(
        table_map_body(
            1,
            "d",
            "t",
            [T.STRING, T.STRING, T.STRING],
            [bytes([T.ENUM, 1]), bytes([T.SET, 8]), bytes([T.STRING, 40])],
        )
    )
    assert tm.column_types == (T.ENUM, T.SET, T.STRING)
    assert tm.column_meta == (T.ENUM << 8 | 1, T.SET << 8 | 8, T.STRING << 8 | 40)


def test_string_meta_length_over_255_stays_string() -> None:
    # CHAR(255) utf8mb4 = 1020 bytes: 0x3FC, bits 8-9 XORed into the type byte -> 0xCE.
    tm = parse_table_map(table_map_body(1, "d", "t", [T.STRING], [bytes([0xCE, 0xFC])]))
    assert tm.column_types == (T.STRING,)
    assert tm.column_meta == (0xCEFC,)


def test_full_optional_metadata() -> None:
    types = [T.LONG, T.VARCHAR, T.STRING, T.STRING, T.BLOB, T.GEOMETRY, T.LONGLONG, T.NEWDECIMAL]
    metas = [
        b"",
        (40).to_bytes(2, "little"),
        bytes([T.ENUM, 1]),
        bytes([T.SET, 1]),
        b"\x02",
        b"\x04",
        b"",
        bytes([10, 2]),
    ]
    enum_values = packed_int(2) + _names("a", "b")
    set_values = packed_int(3) + _names("x", "y", "z")
    optional = [
        (1, bytes([0b1100_0000])),  # numeric columns, MSB first: LONG, LONGLONG unsigned
        (2, packed_int(255) + packed_int(1) + packed_int(63)),  # 2nd char column (BLOB): binary
        (4, _names("id", "name", "e", "s", "b", "g", "big", "amount")),
        (5, set_values),
        (6, enum_values),
        (7, packed_int(1)),  # POINT
        (9, packed_int(0) + packed_int(0) + packed_int(1) + packed_int(10)),
        (10, packed_int(8) + packed_int(1) + packed_int(33)),  # SET column in utf8mb3
        (12, bytes([0b1111_1101])),  # column 6 invisible
        (200, b"future"),
    ]
    tm = parse_table_map(table_map_body(9, "d", "t", types, metas, optional=optional))
    assert tm.signedness == (True, False, False, False, False, False, True, False)
    assert tm.charsets == (None, 255, 8, 33, 63, None, None, None)
    assert tm.column_names == ("id", "name", "e", "s", "b", "g", "big", "amount")
    assert tm.enum_values == (None, None, ("a", "b"), None, None, None, None, None)
    assert tm.set_values == (None, None, None, ("x", "y", "z"), None, None, None, None)
    assert tm.geometry_types == (None, None, None, None, None, 1, None, None)
    assert tm.primary_key == (0, 1)
    assert tm.primary_key_prefixes == (0, 10)
    assert tm.visibility == (True, True, True, True, True, True, False, True)
    assert tm.unknown_metadata == ((200, b"future"),)


def test_column_charset_and_simple_primary_key() -> None:
    types = [T.VARCHAR, T.LONG, T.BLOB, T.STRING]
    metas = [(40).to_bytes(2, "little"), b"", b"\x02", bytes([T.ENUM, 1])]
    optional = [(3, packed_int(45) + packed_int(63)), (11, packed_int(8)), (8, packed_int(1))]
    tm = parse_table_map(table_map_body(1, "d", "t", types, metas, optional=optional))
    assert tm.charsets == (45, None, 63, 8)
    assert tm.primary_key == (1,)
    assert tm.primary_key_prefixes == (0,)


def test_every_truncation_is_a_typed_error() -> None:
    fixed = table_map_body(
        1,
        "db",
        "tbl",
        [T.LONG, T.VARCHAR, T.NEWDECIMAL],
        [b"", (40).to_bytes(2, "little"), bytes([10, 2])],
    )
    body = fixed + bytes([4]) + packed_int(6) + _names("a", "b", "c")
    assert parse_table_map(body).column_names == ("a", "b", "c")
    for cut in range(len(fixed)):  # inside the mandatory part: always an error
        with pytest.raises(BinlogFormatError) as info:
            parse_table_map(body[:cut])
        assert info.value.event_type == "TABLE_MAP"
    for cut in range(len(fixed) + 1, len(body)):  # inside the TLV: an error, never a crash
        with pytest.raises(BinlogFormatError):
            parse_table_map(body[:cut])


def test_truncated_column_types_raise_truncated_error() -> None:
    body = table_map_body(1, "db", "tbl", [T.LONG] * 10, [b""] * 10)
    with pytest.raises(TruncatedError):
        parse_table_map(body[:22])


def test_mariadb_signedness_covers_year_and_charsets_cover_geometry() -> None:
    # MariaDB: YEAR is a Field_num (a signedness bit), GEOMETRY a Field_blob (a charset).
    types = [T.YEAR, T.LONG, T.GEOMETRY, T.VARCHAR]
    metas = [b"", b"", b"\x04", (40).to_bytes(2, "little")]
    optional = [(1, bytes([0b0100_0000])), (3, packed_int(63) + packed_int(45))]
    body = table_map_body(1, "d", "t", types, metas, optional=optional)
    maria = parse_table_map(body, mariadb=True)
    assert maria.signedness == (False, True, False, False)
    assert maria.charsets == (None, None, 63, 45)
    mysql = parse_table_map(body)
    assert mysql.signedness == (False, False, False, False)  # LONG is the only numeric bit
    assert mysql.charsets == (None, None, None, 63)
