"""MySQL 9 TABLE_MAPs with VECTOR columns between character columns.

The bytes follow MySQL ``Table_map_log_event::init_metadata_fields`` (sql/log_event.cc): a
VECTOR column has 1 byte of column metadata (the length-prefix size, 4), counts among the
character columns of DEFAULT_CHARSET / COLUMN_CHARSET (``is_character_type`` lists
MYSQL_TYPE_VECTOR; its collation is binary, 63), and has an entry in VECTOR_DIMENSIONALITY.
The table is the issue's: ``(id INT, vector_column VECTOR(3), foo TEXT, vector_column2
VECTOR(2))`` with utf8mb4 (collation 255).
"""

from __future__ import annotations

import struct

from _binlog_encode import enc_prefixed, image, packed_int, rows_body, table_map_body

from headwater.binlog.constants import ColumnType as T
from headwater.binlog.rows import parse_rows_event
from headwater.binlog.tablemap import parse_table_map

TYPES = [T.LONG, T.VECTOR, T.BLOB, T.VECTOR, T.VARCHAR]
METAS = [b"", b"\x04", b"\x02", b"\x04", (40).to_bytes(2, "little")]
NAMES = ["id", "vector_column", "foo", "vector_column2", "bar"]
# Optional-metadata type codes (enum Optional_metadata_field_type, rows_event.h).
SIGNEDNESS, DEFAULT_CHARSET, COLUMN_CHARSET, COLUMN_NAME, VECTOR_DIMS = 1, 2, 3, 4, 13


def _names() -> bytes:
    return b"".join(packed_int(len(n)) + n.encode() for n in NAMES)


def _table_map(charset_field: tuple[int, bytes]) -> bytes:
    optional = [
        (SIGNEDNESS, bytes([0])),  # one numeric column (id), signed
        charset_field,
        (COLUMN_NAME, _names()),
        (VECTOR_DIMS, packed_int(3) + packed_int(2)),
    ]
    return table_map_body(9, "db", "t", TYPES, METAS, optional=optional)


# Character columns in order: vector_column, foo, vector_column2, bar (indexes 0-3). The most
# common collation is the default; the others are (index, collation) exceptions.
DEFAULT_FORM = (
    DEFAULT_CHARSET,
    packed_int(63) + packed_int(1) + packed_int(255) + packed_int(3) + packed_int(255),
)
COLUMN_FORM = (COLUMN_CHARSET, b"".join(packed_int(c) for c in (63, 255, 63, 255)))


def test_vector_columns_take_their_charset_entries_default_form() -> None:
    tm = parse_table_map(_table_map(DEFAULT_FORM))
    assert tm.charsets == (None, 63, 255, 63, 255)
    assert tm.vector_dimensions == (None, 3, None, 2, None)
    assert tm.column_names == tuple(NAMES)
    assert tm.signedness == (False, False, False, False, False)


def test_vector_columns_take_their_charset_entries_column_form() -> None:
    tm = parse_table_map(_table_map(COLUMN_FORM))
    assert tm.charsets == (None, 63, 255, 63, 255)


def test_text_after_a_vector_decodes_as_text() -> None:
    tm = parse_table_map(_table_map(DEFAULT_FORM))
    row = image(
        [
            struct.pack("<i", 1),
            enc_prefixed(struct.pack("<3f", 1.0, 2.0, 3.0), 4),
            enc_prefixed(b"bar", 2),
            enc_prefixed(struct.pack("<2f", 0.5, -1.0), 4),
            enc_prefixed("grüße".encode(), 1),
        ]
    )
    rows = parse_rows_event(30, rows_body(9, len(TYPES), row), table_map=tm).rows
    assert rows == [(1, (1.0, 2.0, 3.0), "bar", (0.5, -1.0), "grüße")]
