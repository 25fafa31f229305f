"""DDL statements applied to small schema states (no server)."""

from __future__ import annotations

import logging

import pytest

from headwater.position import Position
from headwater.schema import DdlResult, SchemaHistory, TableDef, apply_ddl
from headwater.schema.ddl import classify, strip_comments

DB = "shop"


class _State:
    """A schema history fed statement by statement at increasing positions."""

    def __init__(self, *, mariadb: bool = True) -> None:
        self.history = SchemaHistory(mariadb=mariadb, server_charset="latin1")
        self.history.bootstrap({}, Position(0, 1, 4), databases={DB: "utf8mb4"})
        self.n = 100

    def run(self, sql: str, db: str = DB) -> DdlResult:
        self.n += 1
        return self.history.apply_ddl(sql, db, Position(0, 1, self.n))

    def table(self, name: str, db: str = DB) -> TableDef:
        tdef = self.history.table(db, name)
        assert tdef is not None, f"{db}.{name} missing"
        return tdef


def _cols(tdef: TableDef) -> list[tuple[str, str]]:
    return [(c.name, c.column_type) for c in tdef.columns]


@pytest.fixture
def state() -> _State:
    s = _State()
    s.run(
        "CREATE TABLE t (id INT UNSIGNED NOT NULL AUTO_INCREMENT, name VARCHAR(20),"
        " qty SMALLINT, PRIMARY KEY (id))"
    )
    return s


def test_create_table_columns_types_and_key(state: _State) -> None:
    t = state.table("t")
    assert _cols(t) == [("id", "int unsigned"), ("name", "varchar(20)"), ("qty", "smallint")]
    assert t.primary_key == ("id",)
    assert t.charset == "utf8mb4"  # the database's
    assert [c.nullable for c in t.columns] == [False, True, True]
    assert t.column("NAME") is not None and t.column("name").charset == "utf8mb4"  # type: ignore[union-attr]


def test_create_table_type_rules() -> None:
    s = _State()
    s.run(
        "CREATE TABLE k (a BOOL, b FLOAT(30), c FLOAT(7,2) UNSIGNED, d DECIMAL, e NUMERIC(5),"
        " f CHAR, g TEXT(300) CHARACTER SET utf8mb4, h BLOB(70000), i INT8, j SERIAL,"
        " k NCHAR(2), l VARCHAR(3) CHARACTER SET binary, m JSON, n POINT, o INET6,"
        " p TIMESTAMP(0), q TIME(3), r INT(11) ZEROFILL, s BIT, u YEAR(4))"
    )
    k = s.table("k")
    assert _cols(k) == [
        ("a", "tinyint"),
        ("b", "double"),
        ("c", "float(7,2) unsigned"),
        ("d", "decimal(10,0)"),
        ("e", "decimal(5,0)"),
        ("f", "char(1)"),
        ("g", "text"),  # 300 chars x 4 bytes > 255
        ("h", "mediumblob"),
        ("i", "bigint"),
        ("j", "bigint unsigned"),
        ("k", "char(2)"),
        ("l", "varbinary(3)"),
        ("m", "longtext"),  # MariaDB's JSON
        ("n", "point"),
        ("o", "inet6"),
        ("p", "timestamp"),
        ("q", "time(3)"),
        ("r", "int unsigned zerofill"),
        ("s", "bit(1)"),
        ("u", "year"),
    ]
    by = {c.name: c for c in k.columns}
    assert by["k"].charset == "utf8mb3"
    assert (by["l"].charset, by["h"].charset, by["o"].charset) == ("binary",) * 3
    assert (by["m"].charset, by["m"].collation) == ("utf8mb4", "utf8mb4_bin")
    assert not by["j"].nullable and k.unique_keys == (("j", ("j",)),)


def test_mysql_json_stays_json() -> None:
    s = _State(mariadb=False)
    s.run("CREATE TABLE j (doc JSON)")
    col = s.table("j").columns[0]
    assert (col.data_type, col.charset) == ("json", None)


def test_create_table_charsets_enum_set_generated_invisible() -> None:
    s = _State()
    s.run(
        "CREATE TABLE `x` (`e` ENUM('a','it''s') NOT NULL, s SET('p','q') COLLATE latin1_bin,"
        " g INT AS (1) STORED, v INT GENERATED ALWAYS AS (2) VIRTUAL, m INT AS (3) PERSISTENT,"
        " h INT INVISIBLE, UNIQUE KEY (e), UNIQUE (g), UNIQUE KEY (e, v))"
        " ENGINE=InnoDB DEFAULT CHARSET=latin2"
    )
    x = s.table("x")
    e, set_, g, v, m, h = x.columns
    assert (e.enum_values, e.charset, e.column_type) == (
        ("a", "it's"),
        "latin2",
        "enum('a','it''s')",
    )
    assert (set_.set_values, set_.charset) == (("p", "q"), "latin1")
    assert (g.generated, v.generated, m.generated) == ("STORED", "VIRTUAL", "STORED")
    assert h.invisible and not g.invisible
    # unnamed unique keys take their first column's name, then _2, _3
    assert x.unique_keys == (("e", ("e",)), ("e_2", ("e", "v")), ("g", ("g",)))


def test_create_table_if_not_exists_keeps_the_existing_table(state: _State) -> None:
    before = state.table("t")
    result = state.run("CREATE TABLE IF NOT EXISTS t (other INT)")
    assert result.parsed and result.definitions == ()
    assert state.table("t") is before


def test_create_table_like_across_databases(state: _State) -> None:
    result = state.run("CREATE TABLE other.copy LIKE t")
    copy = state.table("copy", "other")
    assert result.definitions == ((("other", "copy"), copy),)
    assert _cols(copy) == _cols(state.table("t")) and copy.primary_key == ("id",)


def test_alter_multiple_clauses_with_positions(state: _State) -> None:
    state.run(
        "ALTER TABLE t ADD COLUMN flag TINYINT NOT NULL FIRST, ADD price DECIMAL(8,2) AFTER id,"
        " MODIFY COLUMN qty INT UNSIGNED AFTER flag, CHANGE name title VARCHAR(50) NOT NULL,"
        " RENAME COLUMN price TO amount, ALGORITHM=INPLACE, LOCK=NONE"
    )
    t = state.table("t")
    assert _cols(t) == [
        ("flag", "tinyint"),
        ("qty", "int unsigned"),
        ("id", "int unsigned"),
        ("amount", "decimal(8,2)"),
        ("title", "varchar(50)"),
    ]
    assert not t.column("title").nullable  # type: ignore[union-attr]


def test_alter_drop_column_leaves_keys(state: _State) -> None:
    state.run(
        "ALTER TABLE t ADD UNIQUE KEY u (name, qty), DROP PRIMARY KEY, ADD PRIMARY KEY (id, qty)"
    )
    assert state.table("t").primary_key == ("id", "qty")
    state.run("ALTER TABLE t DROP COLUMN qty")
    t = state.table("t")
    assert t.primary_key == ("id",) and t.unique_keys == (("u", ("name",)),)
    state.run("ALTER TABLE t DROP name")
    assert state.table("t").unique_keys == ()


def test_alter_rename_to_another_database(state: _State) -> None:
    result = state.run("ALTER TABLE t RENAME TO archive.t_old, ADD COLUMN z INT")
    assert result.tables == ((DB, "t"), ("archive", "t_old"))
    assert dict(result.definitions)[(DB, "t")] is None
    assert state.history.table(DB, "t") is None
    assert _cols(state.table("t_old", "archive"))[-1] == ("z", "int")


def test_alter_convert_to_charset_grows_text(state: _State) -> None:
    state.run("ALTER TABLE t ADD note TEXT CHARACTER SET latin1, ADD tiny TINYTEXT")
    state.run("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    t = state.table("t")
    assert [(c.name, c.column_type, c.charset) for c in t.columns if c.charset] == [
        ("name", "varchar(20)", "utf8mb4"),
        ("note", "mediumtext", "utf8mb4"),  # 65535 latin1 characters need 4 bytes each
        ("tiny", "tinytext", "utf8mb4"),  # was utf8mb4 already: 63 characters
    ]
    assert t.charset == "utf8mb4"


def test_alter_default_charset_applies_to_new_columns_only(state: _State) -> None:
    state.run("ALTER TABLE t DEFAULT CHARSET=latin1")
    state.run("ALTER TABLE t ADD COLUMN c2 CHAR(2)")
    t = state.table("t")
    assert t.charset == "latin1"
    assert (t.column("name").charset, t.column("c2").charset) == ("utf8mb4", "latin1")  # type: ignore[union-attr]


def test_alter_add_column_list_and_if_not_exists(state: _State) -> None:
    state.run("ALTER TABLE t ADD COLUMN IF NOT EXISTS (qty INT, a INT, b VARCHAR(2))")
    assert _cols(state.table("t"))[-3:] == [("qty", "smallint"), ("a", "int"), ("b", "varchar(2)")]


def test_alter_of_unknown_column_is_reported_unparsed(state: _State) -> None:
    result = state.run("ALTER TABLE t DROP COLUMN nope")
    assert not result.parsed and result.tables == ((DB, "t"),)
    assert "nope" in (result.error or "")
    assert state.history.needs_reread() == {(DB, "t")}


def test_unique_indexes_by_create_drop_and_rename(state: _State) -> None:
    state.run("CREATE UNIQUE INDEX by_name ON t (name(10), qty)")
    state.run("CREATE INDEX plain ON t (qty)")
    assert state.table("t").unique_keys == (("by_name", ("name", "qty")),)
    state.run("ALTER TABLE t RENAME INDEX by_name TO n2")
    assert state.table("t").unique_keys == (("n2", ("name", "qty")),)
    state.run("DROP INDEX n2 ON t")
    assert state.table("t").unique_keys == ()


def test_drop_tables_as_the_server_logs_it(state: _State) -> None:
    state.run("CREATE TABLE u (a INT)")
    result = state.run("DROP TABLE IF EXISTS `t`,`shop`.`u`,`gone` /* generated by server */")
    assert result.kind == "drop_table" and result.parsed
    assert result.tables == ((DB, "t"), (DB, "u"), (DB, "gone"))
    assert result.definitions == (((DB, "t"), None), ((DB, "u"), None))
    assert state.history.tables() == {}


def test_rename_several_tables_sees_earlier_pairs(state: _State) -> None:
    state.run("CREATE TABLE u (a INT)")
    state.run("RENAME TABLE t TO tmp, u TO t, tmp TO other.u")
    assert _cols(state.table("t")) == [("a", "int")]
    assert state.table("u", "other").primary_key == ("id",)
    assert state.history.table(DB, "tmp") is None


def test_truncate_is_ddl_without_a_schema_change(state: _State) -> None:
    version = state.history.version
    result = state.run("TRUNCATE TABLE `t`")
    assert (result.kind, result.is_ddl, result.changes_schema) == ("truncate_table", True, False)
    assert result.tables == ((DB, "t"),)
    assert state.history.version == version


def test_database_ddl(state: _State) -> None:
    state.run(
        "CREATE DATABASE /*!32312 IF NOT EXISTS*/ `sales` /*!40100 DEFAULT CHARACTER SET latin1 */"
    )
    assert state.history.database_charset("sales") == "latin1"
    state.run("CREATE TABLE c (n VARCHAR(3))", db="sales")
    assert state.table("c", "sales").columns[0].charset == "latin1"
    state.run("ALTER DATABASE sales CHARACTER SET = utf8mb4")
    state.run("CREATE TABLE d (n VARCHAR(3))", db="sales")
    assert state.table("d", "sales").columns[0].charset == "utf8mb4"
    state.run("CREATE SCHEMA plain")
    assert state.history.database_charset("plain") == "latin1"  # the server's
    result = state.run("DROP DATABASE sales")
    assert dict(result.definitions) == {("sales", "c"): None, ("sales", "d"): None}
    assert state.history.database_charset("sales") is None


def test_temporary_tables_are_ignored(state: _State) -> None:
    assert state.run("CREATE TEMPORARY TABLE tmp (a INT)").definitions == ()
    result = state.run("DROP TEMPORARY TABLE IF EXISTS `t` /* generated by server */")
    assert result.definitions == () and state.history.table(DB, "t") is not None


@pytest.mark.parametrize(
    "sql",
    [
        "BEGIN",
        "COMMIT",
        "SAVEPOINT s1",
        "GRANT SELECT ON *.* TO 'u'@'%'",
        "SET @x = 1",
        "FLUSH PRIVILEGES",
        "INSERT INTO t VALUES (1)",
        "/* comment */ XA START 'x'",
    ],
)
def test_non_ddl_is_recognized(state: _State, sql: str) -> None:
    result = state.run(sql)
    assert (result.kind, result.is_ddl, result.parsed) == ("none", False, True)


@pytest.mark.parametrize(
    "sql",
    ["CREATE USER 'u'@'%'", "CREATE VIEW v AS SELECT 1", "DROP TRIGGER tr", "RENAME USER a TO b"],
)
def test_other_ddl_changes_nothing(state: _State, sql: str) -> None:
    result = state.run(sql)
    assert (result.kind, result.parsed, result.definitions) == ("other", True, ())


def test_unparseable_ddl_is_recorded_raw_and_reported(
    state: _State, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="headwater.schema.ddl"):
        result = state.run("CREATE TABLE weird (a LONG VARCHAR, b INT)")
    assert (result.parsed, result.kind, result.tables) == (False, "create_table", ((DB, "weird"),))
    assert result.error is not None and "\x1b" not in result.error
    assert any("not applied" in r.message for r in caplog.records)
    assert state.history.needs_reread() == {(DB, "weird")}
    result = state.run("ALTER TABLE t ADD SYSTEM VERSIONING")
    assert not result.parsed and (DB, "t") in state.history.needs_reread()


def test_apply_ddl_never_raises_on_garbage() -> None:
    history = SchemaHistory()
    for sql in [
        "ALTER TABLE",
        "CREATE TABLE (",
        "DROP TABLE",
        "RENAME TABLE a",
        "ALTER TABLE t ADD (",
    ]:
        result = apply_ddl(sql, DB, history)
        assert not result.parsed and result.error


def test_comments_are_stripped_outside_quotes() -> None:
    sql = "CREATE /*!50100 TABLE */ t (a VARCHAR(3) DEFAULT '/* x */') -- tail\n# more"
    assert strip_comments(sql) == "CREATE  TABLE  t (a VARCHAR(3) DEFAULT '/* x */')"
    assert classify(strip_comments("/*M!100100 DROP */ TABLE x")) == ("drop_table", False)
