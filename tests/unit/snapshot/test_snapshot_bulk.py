"""The bulk path's pure parts: cutting a chunk's window to its keys, the LOAD DATA text
format's SQL on both sides, which sinks and transforms qualify, and target names."""

from __future__ import annotations

from typing import Any

from headwater.changes import ChangeRow
from headwater.connections import TargetConnection
from headwater.position import Position
from headwater.schema.model import Column, TableDef
from headwater.sinks.base import StaticSchema
from headwater.sinks.mysql import MysqlSink, MysqlSinkConfig
from headwater.sinks.mysql.bulk import BulkTarget, line_sql, load_sql
from headwater.sinks.postgres import PostgresSink, PostgresSinkConfig
from headwater.snapshot.bulk import bulk_target, chunk_events
from headwater.snapshot.chunking import range_predicate
from headwater.spark.transforms import MaskRule, MaskSpec, RenameDatabaseSpec, RenameTableSpec


def change(
    seq: int, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> ChangeRow:
    key = after if after is not None else before
    assert key is not None
    return ChangeRow("s", "db", "t", op, 0, Position(1, 1, seq, 0), "", "", seq << 24,
                     {"id": key["id"]}, before, after, 0)  # fmt: skip


def in_chunk(key: dict[str, Any]) -> bool:
    """The chunk [10, 20)."""
    return 10 <= int(key["id"]) < 20


def ops(events: list[ChangeRow]) -> list[tuple[int, str, Any, Any]]:
    return [
        (
            e.sequence >> 24,
            e.op,
            None if e.before is None else e.before["id"],
            None if e.after is None else e.after["id"],
        )
        for e in events
    ]


def test_chunk_events_keep_changes_of_keys_in_the_chunk_in_sequence_order() -> None:
    window = [
        change(3, "update", {"id": 12, "v": 1}, {"id": 12, "v": 2}),
        change(1, "insert", None, {"id": 11, "v": 0}),
        change(2, "delete", {"id": 15, "v": 0}, None),
    ]
    assert ops(chunk_events(window, ("id",), in_chunk)) == [
        (1, "insert", None, 11),
        (2, "delete", 15, None),
        (3, "update", 12, 12),
    ]


def test_chunk_events_drop_changes_of_keys_outside_the_chunk() -> None:
    window = [
        change(1, "insert", None, {"id": 25}),
        change(2, "delete", {"id": 9}, None),
        change(3, "update", {"id": 30}, {"id": 31}),
    ]
    assert chunk_events(window, ("id",), in_chunk) == []


def test_chunk_events_update_moving_a_key_out_becomes_a_delete_of_the_old_key() -> None:
    (event,) = chunk_events(
        [change(4, "update", {"id": 12, "v": 1}, {"id": 40, "v": 1})], ("id",), in_chunk
    )
    assert (event.op, event.key, event.before, event.after) == (
        "delete",
        {"id": 12},
        {"id": 12, "v": 1},
        None,
    )
    assert event.sequence == 4 << 24


def test_chunk_events_update_moving_a_key_in_becomes_an_insert_of_the_new_key() -> None:
    (event,) = chunk_events(
        [change(5, "update", {"id": 3, "v": 1}, {"id": 13, "v": 2})], ("id",), in_chunk
    )
    assert (event.op, event.key, event.before, event.after) == (
        "insert",
        {"id": 13},
        None,
        {"id": 13, "v": 2},
    )


def test_chunk_events_update_moving_a_key_inside_the_chunk_stays_an_update() -> None:
    (event,) = chunk_events([change(6, "update", {"id": 12}, {"id": 14})], ("id",), in_chunk)
    assert (event.op, event.before, event.after) == ("update", {"id": 12}, {"id": 14})


TDEF = TableDef(
    "db",
    "t",
    (
        Column("id", "int", "int", nullable=False),
        Column("f", "float", "float"),
        Column("b", "bit", "bit(10)"),
        Column("s", "varchar", "varchar(20)", charset="latin1"),
        Column("j", "json", "json"),
        Column("bin", "varbinary", "varbinary(10)"),
    ),
    ("id",),
)


def test_line_sql_formats_every_column_on_the_server() -> None:
    sql = line_sql(TDEF)
    assert sql is not None
    assert sql.startswith("CONCAT_WS(x'09', COALESCE(CAST(`id` AS BINARY), x'5c4e'), ")
    assert "CAST(CAST(`f` AS DOUBLE) AS BINARY)" in sql
    assert "CAST(`b` + 0 AS BINARY)" in sql
    assert (
        "COALESCE(REPLACE(REPLACE(REPLACE(CAST(`s` AS BINARY), x'5c', x'5c5c'), x'09', x'5c74'),"
        " x'0a', x'5c6e'), x'5c4e')" in sql
    )
    assert "CONVERT(`j` USING utf8mb4)" in sql


def test_line_sql_is_none_for_a_type_without_a_text_form() -> None:
    tdef = TableDef("db", "t", (Column("id", "int", "int"), Column("u", "uuid", "uuid")), ("id",))
    assert line_sql(tdef) is None


def test_load_sql_assigns_through_variables_where_the_text_needs_converting() -> None:
    assert load_sql("/tmp/x'y.tsv", "`d`.`t`", TDEF) == (
        "LOAD DATA LOCAL INFILE '/tmp/x\\'y.tsv' REPLACE INTO TABLE `d`.`t` CHARACTER SET"
        " binary FIELDS TERMINATED BY '\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\n'"
        " (`id`, `f`, @hw2, @hw3, @hw4, `bin`)"
        " SET `b` = CAST(@hw2 AS UNSIGNED), `s` = CONVERT(@hw3 USING latin1),"
        " `j` = CONVERT(@hw4 USING utf8mb4)"
    )


def mysql_sink(**kw: Any) -> MysqlSink:
    return MysqlSink(MysqlSinkConfig("p", TargetConnection(), StaticSchema(()), **kw))


def test_bulk_target_for_mysql_sinks_behind_renames_only() -> None:
    sink = mysql_sink()
    renames = [RenameDatabaseSpec({"shop": "shop2"}), RenameTableSpec({"shop2.a": "b"})]
    target = bulk_target(sink, renames)
    assert target == BulkTarget(
        sink.config, (("database", (("shop", "shop2"),)), ("table", (("shop2.a", "b"),)))
    )
    assert bulk_target(sink, [*renames, MaskSpec({"email": MaskRule("fixed")})]) is None
    assert bulk_target(mysql_sink(zero_dates="null"), renames) is None
    pg = PostgresSink(PostgresSinkConfig("p", TargetConnection(), StaticSchema(())))
    assert bulk_target(pg, []) is None


def test_target_name_applies_renames_in_order_then_the_database_map() -> None:
    target = BulkTarget(
        mysql_sink(database_map=(("shop2", "warehouse"),)).config,
        (("database", (("shop", "shop2"),)), ("table", (("shop2.a", "other.b"),))),
    )
    assert target.target_name("shop", "a") == ("other", "b")
    assert target.target_name("shop", "c") == ("warehouse", "c")
    assert target.target_name("misc", "a") == ("misc", "a")


def test_range_predicate_with_literals_compares_in_the_given_form() -> None:
    sql, params = range_predicate(
        ("a", "b"), (1, "x"), None, literals=("%s", "CONVERT(%s USING latin1)")
    )
    assert sql == "((`a` > %s) OR (`a` = %s AND `b` >= CONVERT(%s USING latin1)))"
    assert params == [1, 1, "x"]
