"""Rows and TABLE_MAPs of real binlog files (../shared/fixtures/binlog/mysql/).

Expected values come from what each file's origin asserts -- blackbeam/rust_mysql_common
@0648371 ``src/binlog/mod.rs`` (test ``binlog_event_roundtrip``) and
osheroff/mysql-binlog-connector-java @a4c14bb
``BinaryLogFileReaderIntegrationTest`` -- and from the SQL that produced the files where the
file records it (DDL in QUERY events, MariaDB ANNOTATE_ROWS, the sakila sample database's
public ``sakila-data.sql``). None of them comes from this decoder's output.
"""

from __future__ import annotations

import gzip
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from headwater.binlog.codec import PartialJson
from headwater.binlog.constants import ColumnType as T, EventType
from headwater.binlog.framing import FormatDescription, iter_buffer_events
from headwater.binlog.jsonb import JsonDiffOperation
from headwater.binlog.rows import ROWS_EVENT_TYPES, RowsEvent, parse_rows_event, rows_event_table_id
from headwater.binlog.tablemap import TableMap, parse_table_map

MYSQL = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "binlog" / "mysql"
FILES = sorted(p.name for p in MYSQL.iterdir())


def decode(name: str) -> tuple[list[TableMap], list[RowsEvent]]:
    """Every TABLE_MAP and rows event of a fixture file, decoded."""
    data = (MYSQL / name).read_bytes()
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    maps: dict[int, TableMap] = {}
    table_maps: list[TableMap] = []
    rows: list[RowsEvent] = []
    size = 6
    mariadb = False
    for ev in iter_buffer_events(data, source=name):
        if ev.type_code == EventType.FORMAT_DESCRIPTION:
            fde = FormatDescription.parse(ev.data)
            size, mariadb = fde.table_id_size, fde.is_mariadb
        elif ev.type_code == EventType.TABLE_MAP:
            tm = parse_table_map(ev.body, table_id_size=size, mariadb=mariadb)
            maps[tm.table_id] = tm
            table_maps.append(tm)
        elif ev.type_code in ROWS_EVENT_TYPES:
            tm = maps[rows_event_table_id(ev.body, table_id_size=size)]
            rows.append(parse_rows_event(ev.type_code, ev.body, table_map=tm, table_id_size=size))
    return table_maps, rows


@pytest.mark.parametrize("name", FILES)
def test_every_table_map_and_rows_event_decodes(name: str) -> None:
    table_maps, events = decode(name)
    for ev in events:
        assert ev.table_map in table_maps
        rows: list[Any] = ev.rows
        if ev.kind == "update":
            for before, after in rows:
                assert (len(before), len(after)) == (len(ev.columns_before), len(ev.columns_after))
        else:
            image = ev.columns_after if ev.kind == "insert" else ev.columns_before
            assert all(len(row) == len(image) for row in rows)


# Strings of rust_mysql_common's mysql-enum-string-set assertions.
D10 = "0123456789"
D100 = D10 * 10
D298 = "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456780123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456780123456789012345678901234567890123456789"  # noqa: E501


def test_enum_string_set_values() -> None:
    # rust_mysql_common mod.rs, binlog_event_roundtrip, "mysql-enum-string-set.000001".
    # CREATE TABLE t(f1 CHAR(128), f2 VARCHAR(300), f3 ENUM('var1', 'variant2', 'foo'),
    #                f4 SET('one', 'two', 'three', 'four'), f5 TEXT)  (QUERY event in the file)
    # Rust gives the ENUM index (1, 2) and SET bitmask (0b101, 0b1010); with the names
    # from binlog_row_metadata=FULL we give the names.
    (tm, *_), events = decode("mysql-enum-string-set.000001")
    assert tm.column_names == ("f1", "f2", "f3", "f4", "f5")
    assert tm.column_types == (T.STRING, T.VARCHAR, T.ENUM, T.SET, T.BLOB)
    insert, update, delete = events
    first = (D100, D298, "var1", ("one", "three"), D10)
    second = ("field1", "field_2", "variant2", ("two", "four"), D298)
    assert (insert.kind, insert.rows) == ("insert", [first])
    assert (update.kind, update.rows) == ("update", [(first, second)])
    assert (delete.kind, delete.rows) == ("delete", [second])
    assert insert.as_dicts() == [dict(zip(tm.column_names, first, strict=True))]


def test_bit_values() -> None:
    # rust_mysql_common mod.rs: "mysql_type_bit.000001" rows are [0b100], b"foo", [0b100000].
    # CREATE TABLE foo(a BIT(3), b TEXT, c BIT(8))  (QUERY event in the file)
    (tm,), (ev,) = decode("mysql_type_bit.000001")
    assert tm.column_meta[0] == 3 and tm.column_meta[2] == 1 << 8  # BIT(3), BIT(8)
    assert ev.rows == [(0b100, "foo", 0b100000)]


def test_mariadb_full_metadata() -> None:
    # rust_mysql_common mod.rs, "mariadb-bin.000001": names id, topic, event_type, event,
    # created; PRI_KEY_FLAG on id only; charsets UNKNOWN, UTF8MB4_GENERAL_CI (45),
    # UTF8MB4_GENERAL_CI, BINARY (63), UNKNOWN; schema toddy_test, table outbox.
    table_maps, events = decode("mariadb-bin.000001")
    for tm in table_maps:
        assert (tm.schema, tm.table) == ("toddy_test", "outbox")
        assert tm.column_names == ("id", "topic", "event_type", "event", "created")
        assert tm.primary_key == (0,)
        assert tm.charsets == (None, 45, 45, 63, None)
    # ANNOTATE_ROWS in the file: insert into outbox (topic, event_type, event)
    #   values ('foo', 'JSON', '{"foo":1}')   -- twice
    assert len(events) == 2
    for ev in events:
        ((_id, topic, event_type, event, created),) = ev.rows
        assert (topic, event_type, event) == ("foo", "JSON", b'{"foo":1}')
        assert isinstance(created, datetime) and created.tzinfo is UTC


def test_minimal_row_metadata() -> None:
    # rust_mysql_common mod.rs (issue 162), "minimal_row_metadata.000001": the column rust
    # names "@2" (0-based) has charset UTF8MB4_0900_AI_CI (255), "@4" holds 3230202323 (it
    # needs the UNSIGNED bit of the metadata).
    (tm,), (ev,) = decode("minimal_row_metadata.000001")
    assert tm.column_names is None
    assert tm.charsets is not None and tm.charsets[2] == 255
    ((*_, value),) = ev.rows
    assert ev.columns_after[-1] == 4
    assert value == 3230202323
    assert list(ev.as_dicts()[0])[-1] == "@5"  # mysqlbinlog numbers columns from 1


def test_invisible_columns_metadata() -> None:
    # rust_mysql_common mod.rs: every optional metadata field of
    # "binlog-invisible-columns.000001" parses. The file's DDL:
    # CREATE TABLE t1 (f1 INT UNSIGNED INVISIBLE, f2 INT UNSIGNED INVISIBLE, f3 INT ,
    #                  f4 TEXT, f5 BLOB, f6 BIGINT UNSIGNED INVISIBLE)
    table_maps, _ = decode("binlog-invisible-columns.000001")
    for tm in table_maps:
        assert tm.unknown_metadata == ()
        assert tm.column_names == ("f1", "f2", "f3", "f4", "f5", "f6")
        assert tm.column_types == (T.LONG, T.LONG, T.LONG, T.BLOB, T.BLOB, T.LONGLONG)
        assert tm.visibility == (False, False, True, True, True, False)
        assert tm.signedness == (True, True, False, False, False, True)
        assert tm.charsets is not None and tm.charsets[4] == 63  # BLOB: binary


def test_json_generated_columns_and_partial_update() -> None:
    # json.binlog.000001 DDL: CREATE TABLE t(id INT PRIMARY KEY AUTO_INCREMENT,
    #   json_col JSON, name VARCHAR(100) AS (json_col->>'$.name'),
    #   age INT AS (json_col->'$.age'))
    # so every image's name and age equal the JSON's "name" and "age".
    import json

    table_maps, events = decode("json.binlog.000001")
    assert table_maps[0].column_types == (T.LONG, T.JSON, T.VARCHAR, T.LONG)
    assert table_maps[0].column_meta == (0, 4, 400, 0)
    images: list[tuple[object, ...]] = []
    partial = [ev for ev in events if ev.is_partial_update]
    for ev in events:
        if ev.is_partial_update:
            continue
        for row in ev.rows:
            images.extend(row if ev.kind == "update" else (row,))  # type: ignore[arg-type]
    assert images
    for _id, doc, name, age in images:
        assert isinstance(doc, str)
        assert (json.loads(doc)["name"], json.loads(doc)["age"]) == (name, age)
    # The PARTIAL_UPDATE_ROWS (binlog_row_image=MINIMAL: the before image has only id):
    # each after image's JSON is a diff replacing $.age by the new generated age.
    (ev,) = partial
    assert ev.columns_before == (0,)
    for (_before,), (diff, _name, age) in ev.rows:  # type: ignore[misc]
        assert isinstance(diff, PartialJson)
        ((op, path, value),) = [(d.operation, d.path, d.value) for d in diff.diffs]
        assert (op, path, json.loads(value)) == (JsonDiffOperation.REPLACE, "$.age", age)


def test_transaction_payload_rows() -> None:
    # rust_mysql_common mod.rs: the decompressed payload of transaction_compression.000001
    # holds QUERY, TABLE_MAP, WRITE_ROWS, XID.
    from headwater.binlog.events import iter_events

    inner = [
        (raw.type_code, ev) for raw, ev in iter_events(MYSQL / "transaction_compression.000001")
    ]
    codes = [code for code, _ in inner]
    at = codes.index(EventType.TRANSACTION_PAYLOAD) + 1
    assert codes[at : at + 4] == [
        EventType.QUERY,
        EventType.TABLE_MAP,
        EventType.WRITE_ROWS,
        EventType.XID,
    ]
    rows_event = inner[at + 2][1]
    assert isinstance(rows_event, RowsEvent)
    assert rows_event.kind == "insert"
    assert len(rows_event.rows) >= 1


@pytest.mark.parametrize(
    ("name", "partial"),
    [
        ("write-full-row.binlog", False),
        ("update-full-row.binlog", False),
        ("write-partial-row.binlog", True),
        ("update-partial-row.binlog", True),
    ],
)
def test_ndb_full_and_partial_row_images(name: str, partial: bool) -> None:
    # SOURCES.md: MySQL 5.1 NDB files with full and with partial row images (of inserts
    # and updates; NDB's deletes carry the primary key only in both).
    _, events = decode(name)
    test_events = [ev for ev in events if ev.table_map.table == "ba" and ev.kind != "delete"]
    widths = {len(ev.columns_before) for ev in test_events} | {
        len(ev.columns_after) for ev in test_events
    }
    widths.discard(0)
    assert (widths != {3}) is partial


# sakila-data.sql (MySQL AB sample database, loaded into mysql-bin.sakila.gz): rows per table.
SAKILA_ROWS = {
    "actor": 200,
    "address": 603,
    "category": 16,
    "city": 600,
    "country": 109,
    "customer": 599,
    "film": 1000,
    "film_actor": 5462,
    "film_category": 1000,
    "film_text": 1000,
    "inventory": 4581,
    "language": 6,
    "payment": 16049,
    "rental": 16044,
    "staff": 2,
    "store": 2,
}


def test_sakila_row_counts_and_values() -> None:
    # binaryLogFileReaderIntegrationTest reads 1462 events from this file; the rows
    # inside them are sakila-data.sql's INSERTs.
    _, events = decode("mysql-bin.sakila.gz")
    counts: Counter[str] = Counter()
    first: dict[str, tuple[object, ...]] = {}
    for ev in events:
        assert ev.kind == "insert"
        counts[ev.table_map.table] += len(ev.rows)
        first.setdefault(ev.table_map.table, ev.rows[0])  # type: ignore[arg-type]
    assert counts == SAKILA_ROWS
    # INSERT INTO actor VALUES (1,'PENELOPE','GUINESS','2006-02-15 04:34:33'), ...
    # last_update is a TIMESTAMP, stored in UTC: the server ran one hour east of UTC,
    # which every TIMESTAMP below shows alike.
    local = timedelta(hours=1)
    assert first["actor"] == (
        1,
        "PENELOPE",
        "GUINESS",
        datetime(2006, 2, 15, 4, 34, 33, tzinfo=UTC) - local,
    )
    # INSERT INTO payment VALUES (1,1,1,76,'2.99','2005-05-25 11:30:37','2006-02-15 22:12:30')
    assert first["payment"] == (
        1,
        1,
        1,
        76,
        Decimal("2.99"),
        datetime(2005, 5, 25, 11, 30, 37),
        datetime(2006, 2, 15, 22, 12, 30, tzinfo=UTC) - local,
    )
    # INSERT INTO rental VALUES (1,'2005-05-24 22:53:30',367,130,'2005-05-26 22:04:30',1,
    #                            '2006-02-15 21:30:53')
    assert first["rental"] == (
        1,
        datetime(2005, 5, 24, 22, 53, 30),
        367,
        130,
        datetime(2005, 5, 26, 22, 4, 30),
        1,
        datetime(2006, 2, 15, 21, 30, 53, tzinfo=UTC) - local,
    )
    # INSERT INTO film VALUES (1,'ACADEMY DINOSAUR','A Epic Drama of a Feminist And a Mad
    #   Scientist who must Battle a Teacher in The Canadian Rockies',2006,1,NULL,6,'0.99',86,
    #   '20.99','PG','Deleted Scenes,Behind the Scenes','2006-02-15 05:03:42')
    # MySQL 5.5 writes no metadata: the TEXT description stays bytes, rating is the ENUM
    # index of 'PG' in ('G','PG','PG-13','R','NC-17'), special_features the SET mask of
    # ('Trailers','Commentaries','Deleted Scenes','Behind the Scenes').
    film = first["film"]
    assert film[:2] == (1, "ACADEMY DINOSAUR")
    assert film[2] == (
        b"A Epic Drama of a Feminist And a Mad Scientist who must Battle a "
        b"Teacher in The Canadian Rockies"
    )
    assert film[3:12] == (2006, 1, None, 6, Decimal("0.99"), 86, Decimal("20.99"), 2, 0b1100)
    assert film[12] == datetime(2006, 2, 15, 5, 3, 42, tzinfo=UTC) - local
    # INSERT INTO language VALUES (1,'English','2006-02-15 05:02:19') -- CHAR(20), unpadded
    assert first["language"][:2] == (1, "English")
    assert first["country"][:2] == (1, "Afghanistan")
    assert first["category"][:2] == (1, "Action")
    # INSERT INTO customer VALUES (1,1,'MARY','SMITH','MARY.SMITH@sakilacustomer.org',5,1,
    #                              '2006-02-14 22:04:36','2006-02-15 04:57:20')
    assert first["customer"][:8] == (
        1,
        1,
        "MARY",
        "SMITH",
        "MARY.SMITH@sakilacustomer.org",
        5,
        1,
        datetime(2006, 2, 14, 22, 4, 36),
    )
