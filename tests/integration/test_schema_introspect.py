"""The schema history against a live MariaDB: information_schema definitions, DDL replayed
from the server's own binlog (it must agree with a fresh information_schema read), FULL
TABLE_MAPs (they must agree with the definitions), and MINIMAL-metadata rows decoded with the
history's column definitions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from headwater.binlog.events import DecodeContext, QueryEvent, RowsEvent, TableMap, iter_events
from headwater.position import Position, binlog_file_number
from headwater.sandbox import MariadbSandbox
from headwater.schema import (
    Column,
    SchemaHistory,
    TableDef,
    read_database_charsets,
    read_server_charset,
    read_tables,
)


@pytest.fixture
def conn(mariadb: MariadbSandbox, db: str) -> Iterator[Any]:
    c = mariadb.connect(db)
    try:
        yield c
    finally:
        c.close()


def _events_since(
    mariadb: MariadbSandbox, start: tuple[str, int], ctx: DecodeContext | None = None
):  # type: ignore[no-untyped-def]
    file, offset = start
    mariadb.execute("FLUSH BINARY LOGS")  # closes the file: every event is on disk
    for raw, event in iter_events(mariadb.binlog_path(file), offset, ctx=ctx):
        yield Position(0, binlog_file_number(file), raw.offset or 0), event


def _history(conn: Any, db: str, at: Position) -> SchemaHistory:
    history = SchemaHistory(mariadb=True)
    history.bootstrap(
        read_tables(conn, [db]),
        at,
        databases=read_database_charsets(conn, [db]),
        server_charset=read_server_charset(conn),
    )
    return history


def test_read_tables_gives_the_canonical_definitions(
    mariadb: MariadbSandbox, db: str, conn: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE types (id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " t TINYINT(3) UNSIGNED ZEROFILL, b BIGINT NOT NULL, d DECIMAL(12,3) UNSIGNED,"
        " f FLOAT, dt DATETIME(6), ts TIMESTAMP(3) NULL, y YEAR,"
        " e ENUM('a','it''s') NOT NULL, s SET('x','y') CHARACTER SET latin1,"
        " c1 CHAR(3) CHARACTER SET latin1, v VARCHAR(10), bin VARBINARY(8), tx MEDIUMTEXT,"
        " bl BLOB, j JSON, g INT AS (b + 1) VIRTUAL, h INT AS (b * 2) PERSISTENT,"
        " inv INT INVISIBLE) DEFAULT CHARSET=utf8mb4",
        "CREATE TABLE composite (a INT NOT NULL, b VARCHAR(5) NOT NULL, c INT,"
        " PRIMARY KEY (b, a), UNIQUE KEY uc (c)) CHARSET latin1",
        "CREATE TABLE nokey (x BINARY(4), y TEXT CHARACTER SET binary, z INT NOT NULL, UNIQUE (z))",
        "CREATE VIEW a_view AS SELECT 1 AS one",
        database=db,
    )
    tables = read_tables(conn, [db])
    assert sorted(tables) == [(db, "composite"), (db, "nokey"), (db, "types")]

    types = tables[(db, "types")]
    assert types.primary_key == ("id",)
    assert types.charset == "utf8mb4"
    got = {c.name: (c.column_type, c.nullable, c.unsigned, c.charset) for c in types.columns}
    assert got == {
        "id": ("int unsigned", False, True, None),
        "t": ("tinyint unsigned zerofill", True, True, None),
        "b": ("bigint", False, False, None),
        "d": ("decimal(12,3) unsigned", True, True, None),
        "f": ("float", True, False, None),
        "dt": ("datetime(6)", True, False, None),
        "ts": ("timestamp(3)", True, False, None),
        "y": ("year", True, False, None),
        "e": ("enum('a','it''s')", False, False, "utf8mb4"),
        "s": ("set('x','y')", True, False, "latin1"),
        "c1": ("char(3)", True, False, "latin1"),
        "v": ("varchar(10)", True, False, "utf8mb4"),
        "bin": ("varbinary(8)", True, False, "binary"),
        "tx": ("mediumtext", True, False, "utf8mb4"),
        "bl": ("blob", True, False, "binary"),
        "j": ("longtext", True, False, "utf8mb4"),
        "g": ("int", True, False, None),
        "h": ("int", True, False, None),
        "inv": ("int", True, False, None),
    }
    assert list(got) == [c.name for c in types.columns]  # table order
    by_name = {c.name: c for c in types.columns}
    assert by_name["e"].enum_values == ("a", "it's")
    assert by_name["s"].set_values == ("x", "y")
    assert (by_name["g"].generated, by_name["h"].generated) == ("VIRTUAL", "STORED")
    assert by_name["inv"].invisible
    assert by_name["c1"].collation == "latin1_swedish_ci"

    composite = tables[(db, "composite")]
    assert composite.primary_key == ("b", "a")
    assert composite.unique_keys == (("uc", ("c",)),)
    assert composite.charset == "latin1"
    assert composite.key_columns == ("b", "a")

    nokey = tables[(db, "nokey")]
    assert nokey == TableDef(
        db,
        "nokey",
        (
            Column("x", "binary", "binary(4)", charset="binary"),
            Column("y", "blob", "blob", charset="binary"),
            Column("z", "int", "int", nullable=False),
        ),
        primary_key=(),
        unique_keys=(("z", ("z",)),),
        charset="utf8mb4",
    )
    assert nokey.key_columns == ("z",)


_DDL = [
    "CREATE TABLE a (id INT PRIMARY KEY, name VARCHAR(20), note TEXT) CHARSET latin1",
    "CREATE TABLE IF NOT EXISTS a (other INT)",
    "ALTER TABLE a ADD COLUMN flag TINYINT UNSIGNED NOT NULL DEFAULT 0 FIRST,"
    " ADD COLUMN price DECIMAL(10,2) AFTER id, MODIFY name VARCHAR(40) NOT NULL",
    "ALTER TABLE a CHANGE COLUMN note body MEDIUMTEXT CHARACTER SET utf8mb4,"
    " RENAME COLUMN price TO amount",
    "ALTER TABLE a ADD UNIQUE KEY (name), ADD INDEX ix_amount (amount), ALGORITHM=COPY",
    "ALTER TABLE a DROP PRIMARY KEY, ADD PRIMARY KEY (id, flag)",
    "ALTER TABLE a ADD COLUMN memo TEXT",
    "CREATE TABLE b LIKE a",
    "ALTER TABLE b CONVERT TO CHARACTER SET utf8mb4",
    "ALTER TABLE b ADD (x INT UNSIGNED, y ENUM('p','q') NOT NULL), DROP COLUMN amount",
    "CREATE TABLE c (k BIGINT UNSIGNED NOT NULL, v VARBINARY(16), UNIQUE KEY uk (k))",
    "CREATE UNIQUE INDEX v_idx ON c (v)",
    "DROP INDEX uk ON c",
    "ALTER TABLE c DEFAULT CHARSET = latin1",
    "ALTER TABLE c ADD COLUMN t VARCHAR(5)",
    "RENAME TABLE c TO d, b TO b2",
    "ALTER TABLE d RENAME TO d2",
    "TRUNCATE TABLE a",
    "CREATE TABLE e (id INT) /*!50100 PARTITION BY HASH (id) PARTITIONS 2 */",
    "ALTER TABLE e ADD COLUMN z SET('m','n') NOT NULL",
    "DROP TABLE IF EXISTS e, nothing_here",
    "CREATE TABLE f (i INT, j INT AS (i * 2) VIRTUAL, p POINT, u INET6)",
    "ALTER TABLE f MODIFY i BIGINT UNSIGNED NOT NULL, ADD PRIMARY KEY (i)",
]


def test_ddl_replayed_from_the_binlog_agrees_with_information_schema(
    mariadb: MariadbSandbox, db: str, conn: Any
) -> None:
    mariadb.execute("CREATE TABLE pre (a INT PRIMARY KEY, b CHAR(2))", database=db)
    start = mariadb.binlog_position()
    history = _history(conn, db, Position(0, binlog_file_number(start[0]), start[1]))
    mariadb.execute(*_DDL, database=db)
    mariadb.execute(f"CREATE DATABASE `{db}_x` CHARACTER SET latin1")
    try:
        mariadb.execute(
            f"CREATE TABLE `{db}_x`.moved (s VARCHAR(3))",
            f"RENAME TABLE `{db}`.pre TO `{db}_x`.pre",
            f"ALTER TABLE `{db}_x`.moved RENAME `{db}`.moved",
            database=db,
        )
        results = [
            history.apply_ddl(ev.query, ev.schema, pos)
            for pos, ev in _events_since(mariadb, start)
            if isinstance(ev, QueryEvent)
        ]
        expected = read_tables(conn, [db, f"{db}_x"])
    finally:
        mariadb.execute(f"DROP DATABASE `{db}_x`")

    assert [r.error for r in results if not r.parsed] == []
    assert history.needs_reread() == set()
    kinds = [r.kind for r in results if r.is_ddl]
    assert kinds.count("truncate_table") == 1
    assert kinds.count("create_database") == 1
    replayed = {k: v for k, v in history.tables().items() if k[0] in (db, f"{db}_x")}
    assert sorted(replayed) == sorted(expected)
    for key, tdef in expected.items():
        assert replayed[key] == tdef, key
    assert history.database_charset(f"{db}_x") == "latin1"
    # CONVERT TO grew the TEXT column to keep 65535 latin1 characters in utf8mb4
    b2 = expected[(db, "b2")]
    assert [(c.name, c.column_type, c.charset) for c in b2.columns if c.charset] == [
        ("name", "varchar(40)", "utf8mb4"),
        ("body", "mediumtext", "utf8mb4"),
        ("memo", "mediumtext", "utf8mb4"),
        ("y", "enum('p','q')", "utf8mb4"),
    ]
    assert b2.primary_key == ("id", "flag")
    assert b2.unique_keys == (("name", ("name",)),)


def test_full_table_maps_agree_with_the_definitions(
    mariadb: MariadbSandbox, db: str, conn: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT UNSIGNED PRIMARY KEY, s SMALLINT, e ENUM('a','b'),"
        " l VARCHAR(5) CHARACTER SET latin1, bi VARBINARY(3), st SET('x','y'), y YEAR,"
        " g GEOMETRY, j JSON)",
        database=db,
    )
    start = mariadb.binlog_position()
    history = _history(conn, db, Position(0, binlog_file_number(start[0]), start[1]))
    mariadb.execute("INSERT INTO t (id, s, e, l) VALUES (1, -2, 'b', 'x')", database=db)
    maps = [(pos, ev) for pos, ev in _events_since(mariadb, start) if isinstance(ev, TableMap)]
    assert len(maps) == 1
    pos, tmap = maps[0]
    assert tmap.column_names is not None
    assert history.observe_table_map(tmap, pos) is None  # nothing to correct
    assert history.version == 1


def test_minimal_metadata_rows_decode_with_the_history(
    mariadb: MariadbSandbox, db: str, conn: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE m (id INT UNSIGNED NOT NULL PRIMARY KEY, big BIGINT UNSIGNED,"
        " name VARCHAR(10) CHARACTER SET latin1, e ENUM('red','green'), s SET('a','b','c'))",
        database=db,
    )
    start = mariadb.binlog_position()
    history = _history(conn, db, Position(0, binlog_file_number(start[0]), start[1]))
    with mariadb.binlog_settings(metadata="MINIMAL"):
        mariadb.execute(
            "INSERT INTO m VALUES (4294967295, 18446744073709551615, 'café', 'green', 'a,c')",
            database=db,
        )
    seen: dict[str, Position] = {}

    def columns(tmap: TableMap):  # type: ignore[no-untyped-def]
        return history.columns_for(tmap, seen["pos"])

    ctx = DecodeContext(columns=columns)
    rows: list[RowsEvent] = []
    for pos, ev in _events_since(mariadb, start, ctx):
        seen["pos"] = pos
        if isinstance(ev, TableMap):
            assert ev.column_names is None  # MINIMAL
            history.observe_table_map(ev, pos)
        elif isinstance(ev, RowsEvent):
            rows.append(ev)
    assert history.needs_reread() == set()
    assert len(rows) == 1
    cols = history.columns_for(rows[0].table_map, seen["pos"])
    assert rows[0].as_dicts(cols) == [
        {
            "id": 4294967295,
            "big": 18446744073709551615,
            "name": "café",
            "e": "green",
            "s": ("a", "c"),
        }
    ]
    # Without the history: no names, ENUM/SET as numbers (MariaDB's MINIMAL metadata still
    # carries signedness and charsets; the unit tests cover TABLE_MAPs without them).
    bare = [ev for _, ev in _events_since(mariadb, start) if isinstance(ev, RowsEvent)]
    assert bare[0].as_dicts(None) == [
        {"@1": 4294967295, "@2": 18446744073709551615, "@3": "café", "@4": 2, "@5": 5}
    ]
