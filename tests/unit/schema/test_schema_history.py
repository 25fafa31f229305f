"""SchemaHistory: versions by position, persistence, TABLE_MAP cross-check (no server)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from headwater.binlog.codec import ColumnDef, RowDecoder
from headwater.binlog.constants import ColumnType
from headwater.binlog.tablemap import TableMap
from headwater.errors import SchemaError
from headwater.position import Position
from headwater.schema import Column, SchemaHistory, TableDef

DB = "app"


def P(offset: int, event: int = 0, file: int = 1) -> Position:
    return Position(0, file, offset, event)


def _users() -> TableDef:
    return TableDef(
        DB,
        "users",
        (
            Column("id", "int", "int unsigned", nullable=False, unsigned=True),
            Column("name", "varchar", "varchar(10)", charset="latin1"),
        ),
        primary_key=("id",),
        charset="latin1",
    )


def _history(path: Path | None = None) -> SchemaHistory:
    history = SchemaHistory.open(path) if path is not None else SchemaHistory()
    history.bootstrap({(DB, "users"): _users()}, P(100), databases={DB: "latin1"})
    return history


def _table_map(
    *,
    names: tuple[str, ...] | None = None,
    signedness: tuple[bool, ...] | None = None,
    charsets: tuple[int | None, ...] | None = None,
    extra: bool = False,
    pk: tuple[int, ...] | None = None,
) -> TableMap:
    types = (ColumnType.LONG, ColumnType.VARCHAR) + ((ColumnType.TINY,) if extra else ())
    return TableMap(
        table_id=7,
        flags=1,
        schema=DB,
        table="users",
        column_types=types,
        column_meta=(0, 10) + ((0,) if extra else ()),
        nullable=(False, True) + ((True,) if extra else ()),
        signedness=signedness,
        charsets=charsets,
        column_names=names,
        primary_key=pk,
    )


def test_table_at_before_at_and_after_each_version() -> None:
    h = _history()
    h.apply_ddl("ALTER TABLE users ADD COLUMN age TINYINT", DB, P(200))
    h.apply_ddl("ALTER TABLE users DROP COLUMN name", DB, P(300, 2))
    names = lambda p: h.table_at(DB, "users", p).column_names  # type: ignore[union-attr]  # noqa: E731
    assert h.table_at(DB, "users", P(99)) is None
    assert names(P(100)) == ("id", "name")
    assert names(P(199, 5)) == ("id", "name")
    assert names(P(200)) == ("id", "name", "age")
    assert names(P(300, 1)) == ("id", "name", "age")
    assert names(P(300, 2)) == ("id", "age")
    assert names(P(10**9)) == ("id", "age")
    assert [h.version_at(p) for p in (P(1), P(100), P(250), P(300, 2))] == [0, 1, 2, 3]
    h.apply_ddl("DROP TABLE users", DB, P(400))
    assert h.table_at(DB, "users", P(401)) is None
    assert names(P(399)) == ("id", "age")


def test_changes_must_come_in_position_order() -> None:
    h = _history()
    h.apply_ddl("ALTER TABLE users ADD COLUMN a INT", DB, P(200))
    with pytest.raises(SchemaError, match="before the last"):
        h.apply_ddl("ALTER TABLE users ADD COLUMN b INT", DB, P(150))


def test_replaying_a_recorded_ddl_returns_the_recorded_result(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    h = _history(path)
    first = h.apply_ddl("ALTER TABLE users ADD COLUMN a INT", DB, P(200))
    h.close()
    h2 = SchemaHistory.open(path)
    again = h2.apply_ddl("ALTER TABLE users ADD COLUMN a INT", DB, P(200))
    assert again.definitions == first.definitions and h2.version == 2
    h2.close()


def test_persistence_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    with _history(path) as h:
        h.apply_ddl("ALTER TABLE users ADD COLUMN tags SET('a','b') NOT NULL", DB, P(200))
        h.apply_ddl("RENAME TABLE users TO people", DB, P(300))
        h.apply_ddl("CREATE TABLE broken (a LONG VARCHAR)", DB, P(400))
        h.repair({(DB, "gone"): None, (DB, "users"): None}, P(500))
        expected = {
            p: (h.table_at(DB, "users", p), h.table_at(DB, "people", p), h.version_at(p))
            for p in (P(150), P(250), P(350))
        }
        stale = h.needs_reread()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["bootstrap", "ddl", "ddl", "ddl"]
    with SchemaHistory.open(path) as loaded:
        for p, (users, people, version) in expected.items():
            assert loaded.table_at(DB, "users", p) == users
            assert loaded.table_at(DB, "people", p) == people
            assert loaded.version_at(p) == version
        assert loaded.needs_reread() == stale == {(DB, "broken")}
        assert loaded.database_charset(DB) == "latin1"
        people_def = loaded.table(DB, "people")
        assert people_def is not None and people_def.columns[-1].set_values == ("a", "b")


def test_torn_last_line_is_ignored_and_cut_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "schema.jsonl"
    with _history(path) as h:
        h.apply_ddl("ALTER TABLE users ADD COLUMN a INT", DB, P(200))
    good = path.read_bytes()
    path.write_bytes(good + b'{"v":1,"kind":"ddl","version":3,"po')
    with caplog.at_level(logging.WARNING), SchemaHistory.open(path) as h:
        assert h.version == 2
        assert any("torn" in r.message for r in caplog.records)
        assert path.read_bytes() == good
        h.apply_ddl("ALTER TABLE users ADD COLUMN b INT", DB, P(300))
    with SchemaHistory.open(path) as h:
        assert h.table(DB, "users").column_names == ("id", "name", "a", "b")  # type: ignore[union-attr]


def test_read_only_open_never_touches_a_file_being_written(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    with _history(path) as h:
        h.apply_ddl("ALTER TABLE users ADD COLUMN a INT", DB, P(200))
    partial = path.read_bytes() + b'{"v":1,"kind":"ddl","version":3,"po'  # a write under way
    path.write_bytes(partial)
    with SchemaHistory.open(path, read_only=True) as h:
        assert h.version == 2
        h.apply_ddl("ALTER TABLE users ADD COLUMN b INT", DB, P(300))  # in memory only
        assert h.table(DB, "users").column_names == ("id", "name", "a", "b")  # type: ignore[union-attr]
    assert path.read_bytes() == partial


def test_corrupt_line_before_the_last_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    with _history(path) as h:
        h.apply_ddl("ALTER TABLE users ADD COLUMN a INT", DB, P(200))
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0][:-5], *lines[1:]]))
    with pytest.raises(SchemaError, match="record 1 is corrupt"):
        SchemaHistory.open(path)


def test_full_table_map_that_agrees_changes_nothing() -> None:
    h = _history()
    tm = _table_map(names=("id", "name"), signedness=(True, False), charsets=(None, 8), pk=(0,))
    assert h.observe_table_map(tm, P(200)) is None
    assert h.version == 1


def test_full_table_map_corrects_the_definition(caplog: pytest.LogCaptureFixture) -> None:
    h = _history()
    # names and signedness differ, the charset is utf8mb4 (45), one more column
    tm = _table_map(names=("uid", "label"), signedness=(False, False), charsets=(None, 45), pk=(0,))
    with caplog.at_level(logging.WARNING):
        corrected = h.observe_table_map(tm, P(200))
    assert corrected is not None and any("TABLE_MAP" in r.message for r in caplog.records)
    assert [(c.name, c.column_type, c.unsigned, c.charset) for c in corrected.columns] == [
        ("uid", "int", False, None),
        ("label", "varchar(10)", False, "utf8mb4"),
    ]
    assert corrected.primary_key == ("uid",)
    assert h.table_at(DB, "users", P(200)) == corrected
    assert h.table_at(DB, "users", P(199)) == _users()
    wider = _table_map(names=("uid", "label", "flag"), signedness=(False, False, True), extra=True)
    grown = h.observe_table_map(wider, P(300))
    assert grown is not None and grown.columns[2] == Column(
        "flag", "tinyint", "tinyint unsigned", unsigned=True
    )


def test_minimal_table_map_with_other_column_count_needs_a_reread() -> None:
    h = _history()
    assert h.observe_table_map(_table_map(), P(200)) is None
    assert h.needs_reread() == set()
    h.observe_table_map(_table_map(extra=True), P(300))
    assert h.needs_reread() == {(DB, "users")}
    fresh = TableDef(
        DB,
        "users",
        (*_users().columns, Column("flag", "tinyint", "tinyint")),
        primary_key=("id",),
        charset="latin1",
    )
    assert h.repair({(DB, "users"): fresh}, P(300)) == 2
    assert h.needs_reread() == set()
    assert h.repair({(DB, "users"): fresh}, P(400)) is None  # unchanged: no new version


def test_columns_for_decodes_a_minimal_row_image() -> None:
    h = _history()
    tm = _table_map()  # no signedness, no charsets, no names
    cols = h.columns_for(tm, P(150))
    assert cols == (
        ColumnDef("id", unsigned=True),
        ColumnDef("name", charset="latin1"),
    )
    row = b"\x00" + b"\xff\xff\xff\xff" + b"\x04caf\xe9"
    assert RowDecoder(tm, cols).decode_image(row, 0) == ((4294967295, "café"), len(row))
    assert RowDecoder(tm, None).decode_image(row, 0)[0] == (-1, "caf\udce9")
    assert h.columns_for(tm, P(50)) is None  # before the bootstrap
    assert h.columns_for(_table_map(extra=True), P(150)) is None  # shape differs


def test_bootstrap_again_replaces_everything() -> None:
    h = _history()
    h.apply_ddl("CREATE TABLE other (a INT)", DB, P(200))
    h.bootstrap({(DB, "users"): _users()}, P(300))
    assert set(h.tables()) == {(DB, "users")}
    assert h.table_at(DB, "other", P(250)) is not None


def test_primary_key_for_follows_the_versions() -> None:
    h = _history()
    h.apply_ddl("ALTER TABLE users DROP PRIMARY KEY", DB, P(200))
    h.apply_ddl("ALTER TABLE users ADD PRIMARY KEY (name, id)", DB, P(300))
    assert h.primary_key_for(DB, "users", P(150)) == ("id",)
    assert h.primary_key_for(DB, "users", P(250)) is None
    assert h.primary_key_for(DB, "users", P(300)) == ("name", "id")
    assert h.primary_key_for(DB, "nosuch", P(300)) is None


def test_history_is_a_schema_lookup_for_change_rows() -> None:
    from headwater.changes import SchemaLookup

    lookup: SchemaLookup = _history()
    assert lookup.primary_key_for(DB, "users", P(100)) == ("id",)
