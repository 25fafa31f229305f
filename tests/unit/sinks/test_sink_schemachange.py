"""Schema changes as steps (headwater.sinks.schemachange) and each SQL dialect's DDL for them.

Definitions before/after a statement are built with the project's own DDL replay
(:func:`headwater.schema.ddl.apply_ddl` through :class:`SchemaHistory`), so the steps are
checked against what the reader would record, not against hand-made definitions.
"""

from __future__ import annotations

import pytest

from headwater.connections import TargetConnection
from headwater.position import Position
from headwater.schema.ddlscope import ddl_scope
from headwater.schema.history import SchemaHistory
from headwater.schema.model import Column, TableDef
from headwater.sinks.base import DdlMode, StaticSchema
from headwater.sinks.dialect import SqlSinkConfig
from headwater.sinks.mysql.client import MysqlDialect
from headwater.sinks.postgres.client import PostgresDialect
from headwater.sinks.schemachange import Step, TargetColumns, plan_schema_change, widens
from headwater.spark.offsets import TableMatcher

BEFORE = Position(0, 1, 100)
AFTER = Position(0, 1, 200)


def _history(setup: list[str], change: str) -> SchemaHistory:
    history = SchemaHistory()
    for i, sql in enumerate(setup):
        history.apply_ddl(sql, "shop", Position(0, 1, 10 + i))
    history.apply_ddl(change, "shop", AFTER)
    return history


def _plan(
    mode: DdlMode,
    setup: list[str],
    change: str,
    target: dict[tuple[str, str], dict[str, tuple[str, bool]]],
) -> list[Step]:
    history = _history(setup, change)

    def on_target(db: str, table: str) -> TargetColumns:
        return target.get((db, table))

    return plan_schema_change(
        mode,
        ddl_scope(change, "shop"),
        change,
        lambda db, t: history.table_at(db, t, BEFORE),
        lambda db, t: history.table_at(db, t, AFTER),
        on_target,
        runs_source_sql=True,
    )


T_SQL = "CREATE TABLE t (id INT NOT NULL PRIMARY KEY, a VARCHAR(10) NOT NULL, b INT)"
T_TARGET = {("shop", "t"): {"id": ("int", False), "a": ("varchar(10)", False), "b": ("int", True)}}
CONFIG = SqlSinkConfig("p", TargetConnection(), StaticSchema(()), database_map=(("shop", "s2"),))


def _ops(steps: list[Step]) -> list[tuple[str, str]]:
    return [
        (s.op, s.name or (s.column.name if s.column else s.new_table or s.table)) for s in steps
    ]


def test_statements_not_about_data_give_no_step_in_any_mode() -> None:
    for mode in DdlMode:
        for sql in (
            "CREATE USER 'evil'@'%' IDENTIFIED BY 'pw'",
            "GRANT ALL ON *.* TO 'evil'@'%'",
            "SET PASSWORD FOR 'x'@'%' = PASSWORD('pw')",
        ):
            assert _plan(mode, [T_SQL], sql, T_TARGET) == []


def test_drop_column_evolve_drops_lenient_keeps_it_nullable() -> None:
    sql = "ALTER TABLE t DROP COLUMN a"
    assert _ops(_plan(DdlMode.EVOLVE, [T_SQL], sql, T_TARGET)) == [("drop_column", "a")]
    lenient = _plan(DdlMode.LENIENT, [T_SQL], sql, T_TARGET)
    assert _ops(lenient) == [("relax_column", "a")]
    assert MysqlDialect().render_step(lenient[0], CONFIG) == [
        "ALTER TABLE `s2`.`t` MODIFY COLUMN `a` varchar(10)"
    ]
    assert PostgresDialect().render_step(lenient[0], CONFIG) == [
        'ALTER TABLE "s2"."t" ALTER COLUMN "a" DROP NOT NULL'
    ]
    assert _plan(DdlMode.IGNORE, [T_SQL], sql, T_TARGET) == []


def test_rename_column_is_told_from_drop_and_add_by_position() -> None:
    for sql in ("ALTER TABLE t RENAME COLUMN b TO c", "ALTER TABLE t CHANGE b c INT"):
        for mode in (DdlMode.EVOLVE, DdlMode.LENIENT):
            steps = _plan(mode, [T_SQL], sql, T_TARGET)
            assert [(s.op, s.name, s.new_name) for s in steps] == [("rename_column", "b", "c")]
            assert PostgresDialect().render_step(steps[0], CONFIG) == [
                'ALTER TABLE "s2"."t" RENAME COLUMN "b" TO "c"'
            ]


def test_add_and_modify_column_render_each_dialects_types() -> None:
    steps = _plan(DdlMode.EVOLVE, [T_SQL], "ALTER TABLE t ADD COLUMN d DECIMAL(8,2)", T_TARGET)
    assert _ops(steps) == [("add_column", "d")]
    assert MysqlDialect().render_step(steps[0], CONFIG) == [
        "ALTER TABLE `s2`.`t` ADD COLUMN `d` decimal(8,2)"
    ]
    assert PostgresDialect().render_step(steps[0], CONFIG) == [
        'ALTER TABLE "s2"."t" ADD COLUMN "d" numeric(8,2)'
    ]
    steps = _plan(DdlMode.EVOLVE, [T_SQL], "ALTER TABLE t MODIFY b BIGINT NOT NULL", T_TARGET)
    assert _ops(steps) == [("modify_column", "b")]
    assert PostgresDialect().render_step(steps[0], CONFIG) == [
        'ALTER TABLE "s2"."t" ALTER COLUMN "b" TYPE bigint USING "b"::bigint',
        'ALTER TABLE "s2"."t" ALTER COLUMN "b" SET NOT NULL',
    ]


def test_lenient_widens_but_never_narrows() -> None:
    widen = _plan(DdlMode.LENIENT, [T_SQL], "ALTER TABLE t MODIFY a VARCHAR(40) NOT NULL", T_TARGET)
    assert _ops(widen) == [("modify_column", "a")]
    narrow = _plan(DdlMode.LENIENT, [T_SQL], "ALTER TABLE t MODIFY a VARCHAR(5) NOT NULL", T_TARGET)
    assert narrow == []
    assert _ops(_plan(DdlMode.EVOLVE, [T_SQL], "ALTER TABLE t MODIFY a VARCHAR(5)", T_TARGET)) == [
        ("modify_column", "a")
    ]


@pytest.mark.parametrize(
    ("old", "new", "wider"),
    [
        ("int", "bigint", True),
        ("bigint", "int", False),
        ("int unsigned", "bigint", True),
        ("int unsigned", "int", False),
        ("varchar(10)", "varchar(20)", True),
        ("varchar(20)", "varchar(10)", False),
        ("varchar(200)", "text", True),
        ("text", "varchar(200)", False),
        ("decimal(8,2)", "decimal(10,3)", True),
        ("decimal(8,2)", "decimal(8,3)", False),
        ("float", "double", True),
        ("datetime(3)", "datetime(6)", True),
        ("enum('a','b')", "enum('a','b','c')", True),
        ("enum('a','b')", "enum('b','a')", False),
        ("int", "varchar(10)", False),
    ],
)
def test_widens(old: str, new: str, wider: bool) -> None:
    def col(column_type: str) -> Column:
        base = column_type.split("(")[0].split()[0]
        return Column("c", base, column_type, unsigned="unsigned" in column_type)

    assert widens(col(old), col(new)) is wider


def test_not_null_to_null_widens_and_back_does_not() -> None:
    assert widens(Column("c", "int", "int", nullable=False), Column("c", "int", "int"))
    assert not widens(Column("c", "int", "int"), Column("c", "int", "int", nullable=False))


def test_drop_then_create_with_another_shape() -> None:
    # The target still holds the old table (its DROP was not applied, or not yet).
    recreate = "CREATE TABLE t (id INT NOT NULL PRIMARY KEY, z DATE)"
    history_setup = [T_SQL, "DROP TABLE t"]
    evolve = _plan(DdlMode.EVOLVE, history_setup, recreate, T_TARGET)
    assert _ops(evolve) == [("drop_table", "t"), ("create_table", "t")]
    assert MysqlDialect().render_step(evolve[1], CONFIG) == [
        "CREATE TABLE IF NOT EXISTS `s2`.`t` (`id` int NOT NULL, `z` date, PRIMARY KEY (`id`))"
        " DEFAULT CHARSET=utf8mb4"
    ]
    lenient = _plan(DdlMode.LENIENT, history_setup, recreate, T_TARGET)
    assert _ops(lenient) == [("truncate", "t"), ("relax_column", "a"), ("add_column", "z")]
    # CREATE TABLE IF NOT EXISTS of a table the source already had changes nothing.
    again = "CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY)"
    assert _plan(DdlMode.LENIENT, [T_SQL], again, T_TARGET) == []


def test_rename_and_truncate_tables() -> None:
    steps = _plan(DdlMode.LENIENT, [T_SQL], "RENAME TABLE t TO u", T_TARGET)
    assert [(s.op, s.table, s.new_table) for s in steps] == [("rename_table", "t", "u")]
    assert MysqlDialect().render_step(steps[0], CONFIG) == ["RENAME TABLE `s2`.`t` TO `s2`.`u`"]
    assert PostgresDialect().render_step(steps[0], CONFIG) == ['ALTER TABLE "s2"."t" RENAME TO "u"']
    done = {("shop", "u"): T_TARGET[("shop", "t")]}
    assert _plan(DdlMode.LENIENT, [T_SQL], "RENAME TABLE t TO u", done) == []
    steps = _plan(DdlMode.LENIENT, [T_SQL], "TRUNCATE TABLE t", T_TARGET)
    assert _ops(steps) == [("truncate", "t")]
    assert _ops(_plan(DdlMode.LENIENT, [T_SQL], "DROP TABLE t", T_TARGET)) == []
    assert _ops(_plan(DdlMode.EVOLVE, [T_SQL], "DROP TABLE t", T_TARGET)) == [("drop_table", "t")]


def test_replayed_add_column_does_nothing() -> None:
    target = {("shop", "t"): {**T_TARGET[("shop", "t")], "d": ("int", True)}}
    assert _plan(DdlMode.EVOLVE, [T_SQL], "ALTER TABLE t ADD COLUMN d INT", target) == []


def test_primary_key_change_on_postgres_finds_the_constraint() -> None:
    steps = _plan(
        DdlMode.EVOLVE, [T_SQL], "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, a)", T_TARGET
    )
    assert [(s.op, s.key) for s in steps] == [("primary_key", ("id", "a"))]
    sql = PostgresDialect().render_step(steps[0], CONFIG)
    assert "contype = 'p'" in sql[0] and '\'"s2"."t"\'::regclass' in sql[0]
    assert sql[1] == 'ALTER TABLE "s2"."t" ADD PRIMARY KEY ("id", "a")'
    assert MysqlDialect().render_step(steps[0], CONFIG) == [
        "ALTER TABLE `s2`.`t` DROP PRIMARY KEY, ADD PRIMARY KEY (`id`, `a`)"
    ]


def test_database_ddl() -> None:
    assert _ops(_plan(DdlMode.LENIENT, [], "CREATE DATABASE shop", {})) == [("create_database", "")]
    assert MysqlDialect().render_step(Step("create_database", "shop"), CONFIG) == [
        "CREATE DATABASE IF NOT EXISTS `s2`"
    ]
    assert _plan(DdlMode.LENIENT, [], "DROP DATABASE shop", {}) == []
    assert _ops(_plan(DdlMode.EVOLVE, [], "DROP DATABASE shop", {})) == [("drop_database", "")]


def test_ddl_mode_keeps_the_older_names() -> None:
    assert DdlMode("apply") is DdlMode.EVOLVE
    assert DdlMode("skip") is DdlMode.IGNORE
    assert [m.value for m in DdlMode] == ["evolve", "lenient", "ignore", "fail"]


def test_table_filter_of_a_pipeline_applies_to_ddl_by_its_objects() -> None:
    one = TableMatcher(("shop.x",))
    assert one.wants_ddl("ALTER TABLE x ADD COLUMN c INT", "shop")
    assert one.wants_ddl("ALTER TABLE `shop`.`x` ADD COLUMN c INT", "other")
    assert not one.wants_ddl("ALTER TABLE y ADD COLUMN c INT", "shop")
    assert not one.wants_ddl("DROP DATABASE IF EXISTS otherdb", "shop")
    assert not one.wants_ddl("CREATE DATABASE secret", "shop")
    assert not one.wants_ddl("CREATE USER 'evil'@'%' IDENTIFIED BY 'pw'", "shop")
    whole = TableMatcher(("shop.*",))
    assert whole.wants_ddl("CREATE DATABASE shop", "")
    assert whole.wants_ddl("RENAME TABLE shop.x TO shop.y", "")
    assert not whole.wants_ddl("CREATE DATABASE secret", "shop")
    everything = TableMatcher()
    assert everything.wants_ddl("CREATE DATABASE secret", "")
    assert not everything.wants_ddl("GRANT ALL ON *.* TO 'evil'@'%'", "")


def test_table_def_of_a_step_round_trips() -> None:
    tdef = TableDef("shop", "t", (Column("id", "int", "int", nullable=False),), ("id",))
    assert PostgresDialect().render_step(Step("create_table", "shop", "t", tdef=tdef), CONFIG) == [
        'CREATE TABLE IF NOT EXISTS "s2"."t" ("id" integer NOT NULL, PRIMARY KEY ("id"))',
    ]


def test_pipeline_renames_apply_to_ddl_objects_qualified_or_not() -> None:
    from headwater.sinks.schemachange import scope_of
    from headwater.spark.transforms import RenameDatabaseSpec, RenameTableSpec, TransformedSchema

    view = TransformedSchema(
        StaticSchema(()),
        (RenameDatabaseSpec({"shop": "copy"}), RenameTableSpec({"copy.t": "t_new"})),
    )
    # The DDL row's database was renamed with the rows (``copy``); the text keeps ``shop``.
    assert scope_of("ALTER TABLE t ADD COLUMN c INT", "copy", view).objects == (("copy", "t_new"),)
    assert scope_of("ALTER TABLE `shop`.`u` ADD COLUMN c INT", "copy", view).objects == (
        ("copy", "u"),
    )
    assert scope_of("RENAME TABLE shop.t TO shop.v", "", view).objects == (
        ("copy", "t_new"),
        ("copy", "v"),
    )
    assert scope_of("DROP DATABASE shop", "", view).objects == (("copy", None),)
    plain = scope_of("ALTER TABLE t ADD COLUMN c INT", "shop", StaticSchema(()))
    assert plain.objects == (("shop", "t"),)
