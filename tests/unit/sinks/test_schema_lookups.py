"""Table-definition lookups of the sinks: one definition object per interval between two
schema changes, the schema file checked once per apply call, and every change of the
history (a DDL appended, the file replaced) seen by the next call."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from headwater.position import Position
from headwater.schema.history import SchemaHistory
from headwater.schema.model import Column, TableDef
from headwater.sinks import SchemaFile, StaticSchema
from headwater.sinks.base import pinned_schemas
from headwater.sinks.definitions import row_definitions
from headwater.sinks.merge import ROLE_KEY, ChangeColumns
from headwater.spark.transforms import (
    ExcludeSpec,
    RenameColumnsSpec,
    RenameTableSpec,
    TransformedSchema,
)

T = TableDef(
    "shop",
    "t",
    (Column("id", "int", "int", nullable=False), Column("a", "int", "int")),
    primary_key=("id",),
)
U = TableDef("shop", "u", (Column("id", "int", "int", nullable=False),), primary_key=("id",))
BOOT, DDL, LATER = Position(0, 1, 4), Position(0, 1, 500), Position(0, 1, 900)


def at(offset: int) -> Position:
    return Position(0, 1, offset)


def write_history(path: Path, column: str = "v") -> None:
    with SchemaHistory.open(path) as history:
        history.bootstrap({T.key: T}, BOOT)
        history.apply_ddl(f"ALTER TABLE t ADD COLUMN {column} INT", "shop", DDL)


def test_transformed_schema_builds_one_definition_per_interval() -> None:
    history = SchemaHistory()
    history.bootstrap({T.key: T}, BOOT)
    history.apply_ddl("ALTER TABLE t ADD COLUMN v INT", "shop", DDL)
    view = TransformedSchema(history, (RenameColumnsSpec({"a": "amount"}),))
    first = view.table_at("shop", "t", at(100))
    assert first is not None and first.column_names == ("id", "amount")
    assert view.table_at("shop", "t", at(499)) is first  # same interval: same object
    after = view.table_at("shop", "t", at(501))
    assert after is not None and after.column_names == ("id", "amount", "v")
    assert view.table_at("shop", "t", at(100)) is first  # back before the DDL
    # A schema change recorded while the view is in use starts a new interval; the ones
    # before it keep their definitions.
    history.apply_ddl("ALTER TABLE t DROP COLUMN a", "shop", LATER)
    latest = view.table_at("shop", "t", at(950))
    assert latest is not None and latest.column_names == ("id", "v")
    assert view.table_at("shop", "t", at(600)) is after
    assert view.table_at("shop", "t", at(3)) is None  # before the bootstrap


def test_transformed_schema_caches_renamed_names_apart() -> None:
    history = SchemaHistory()
    u = TableDef("shop", "u", T.columns, primary_key=("id",))
    history.bootstrap({T.key: T, u.key: u}, BOOT)
    view = TransformedSchema(
        history, (RenameTableSpec({"shop.t": "orders"}), ExcludeSpec(("a",), ("shop\\.orders",)))
    )
    orders = view.table_at("shop", "orders", at(10))
    assert orders is not None and (orders.table, orders.column_names) == ("orders", ("id",))
    other = view.table_at("shop", "u", at(10))
    assert other is not None and (other.table, other.column_names) == ("u", ("id", "a"))
    assert view.table_at("shop", "orders", at(20)) is orders


def test_transformed_schema_pickles_without_its_cache() -> None:
    view = TransformedSchema(StaticSchema((T,)), (RenameColumnsSpec({"a": "b"}),))
    assert view.table_at("shop", "t", at(10)) is not None
    copy = pickle.loads(pickle.dumps(view))
    assert copy == view
    assert copy._built == {} and copy._names == {}
    found = copy.table_at("shop", "t", at(10))
    assert found is not None and found.column_names == ("id", "b")


def test_ddl_between_two_rows_of_one_apply_call(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    write_history(path)
    view = TransformedSchema(SchemaFile(str(path)), ())
    with pinned_schemas():
        before = view.table_at("shop", "t", at(400))
        after = view.table_at("shop", "t", at(600))
        again = view.table_at("shop", "t", at(450))
    assert before is not None and before.column_names == ("id", "a")
    assert after is not None and after.column_names == ("id", "a", "v")
    assert again is before


def test_schema_file_is_checked_once_per_apply_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "schema.jsonl"
    write_history(path)
    schema = TransformedSchema(SchemaFile(str(path)), ())
    assert schema.table_at("shop", "t", at(10)) == T  # read once (reading stats it too)
    checks: list[str] = []
    real_stat = os.stat

    def counting_stat(p: object, *args: object, **kw: object) -> os.stat_result:
        if str(p) == str(path):
            checks.append(str(p))
        return real_stat(p, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", counting_stat)
    with pinned_schemas():
        for offset in range(100, 1100):  # a thousand single-row transactions
            assert schema.table_at("shop", "t", at(offset)) is not None
    assert len(checks) == 1
    with pinned_schemas():
        schema.table_at("shop", "t", at(10))
        schema.table_at("shop", "t", at(20))
    assert len(checks) == 2
    schema.table_at("shop", "t", at(10))  # outside a scope: every lookup checks
    schema.table_at("shop", "t", at(20))
    assert len(checks) == 4


def test_ddl_appended_while_running_is_seen_by_the_next_call(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    write_history(path)
    schema = TransformedSchema(SchemaFile(str(path)), ())
    with SchemaHistory.open(path) as writer:  # the reader, appending
        with pinned_schemas():
            current = schema.table_at("shop", "t", at(950))
            assert current is not None and current.column_names == ("id", "a", "v")
            writer.apply_ddl("ALTER TABLE t ADD COLUMN w INT", "shop", LATER)
            # This call's rows were read before the DDL was recorded: none is after it.
            assert schema.table_at("shop", "t", at(950)) is current
        with pinned_schemas():
            latest = schema.table_at("shop", "t", at(950))
            assert latest is not None and latest.column_names == ("id", "a", "v", "w")
            assert schema.table_at("shop", "t", at(600)) == current
        writer.apply_ddl("ALTER TABLE t DROP COLUMN a", "shop", Position(0, 1, 990))
    dropped = schema.table_at("shop", "t", at(995))  # no scope: seen at once
    assert dropped is not None and dropped.column_names == ("id", "v", "w")


def test_schema_file_replaced_while_running(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    write_history(path, "v")
    schema = TransformedSchema(SchemaFile(str(path)), ())
    old = schema.table_at("shop", "t", at(600))
    assert old is not None and old.column_names == ("id", "a", "v")
    # A new task's history: same length, same modification time, another file.
    other = tmp_path / "new.jsonl"
    write_history(other, "w")
    stat = path.stat()
    assert other.stat().st_size == stat.st_size
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, path)
    with pinned_schemas():
        new = schema.table_at("shop", "t", at(600))
    assert new is not None and new.column_names == ("id", "a", "w")
    assert schema.table_at("shop", "t", at(100)) == T


class CountingSchema:
    """A schema source that counts its lookups (a real history underneath)."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.lookups = 0

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None:
        self.lookups += 1
        found: TableDef | None = self.base.table_at(database, table, position)
        return found


def columns_at(rows: list[tuple[str, str, str, int]]) -> ChangeColumns:
    """Change columns of ``(source, database, table, offset)`` rows, in sequence order."""
    n = len(rows)
    return ChangeColumns(
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], ["insert"] * n,
        list(range(1, n + 1)), [0] * n, [1] * n, [r[3] for r in rows], [0] * n,
        [f'{{"id":{i}}}' for i in range(n)], ['{"id":1}'] * n, [ROLE_KEY] * n,
    )  # fmt: skip


def test_row_definitions_equal_a_lookup_per_row_across_schema_changes() -> None:
    history = SchemaHistory()
    history.bootstrap({T.key: T, U.key: U}, BOOT)
    for n, offset in enumerate((300, 301, 2_000, 4_000, 5_000, 5_001, 5_002)):
        ddl = "ALTER TABLE u ADD COLUMN w INT" if offset == 4_000 else f"ALTER TABLE t ADD c{n} INT"
        history.apply_ddl(ddl, "shop", at(offset))
    # One row per offset, interleaving two tables and a second source whose positions
    # are not comparable with the first's (rows of a run are in sequence order).
    rows = [("s", "shop", "t" if o % 3 else "u", o) for o in range(10, 8_000, 7)]
    other = iter(range(1_000, 7_000, 50))  # s2's offsets grow with its own sequence
    rows = [r for row in rows for r in ([row, ("s2", "shop", "t", next(other, 7_000))]
                                         if row[3] % 4 == 0 else [row])]  # fmt: skip
    cols = columns_at(rows)
    counting = CountingSchema(history)
    found = row_definitions(cols, range(len(rows)), counting)
    want = {i: history.table_at("shop", rows[i][2], cols.position(i)) for i in range(len(rows))}
    assert found == want
    assert all(found[i] is want[i] for i in want)  # the history's own objects
    assert counting.lookups < len(rows) // 4  # bisected, not one per row


def test_row_definitions_of_one_interval_take_two_lookups() -> None:
    history = SchemaHistory()
    history.bootstrap({T.key: T}, BOOT)
    cols = columns_at([("s", "shop", "t", o) for o in range(10, 30_010, 3)])
    counting = CountingSchema(history)
    found = row_definitions(cols, range(len(cols.op)), counting)
    assert counting.lookups == 2
    assert set(map(id, found.values())) == {id(history.table_at("shop", "t", at(10)))}


def test_row_definitions_never_spread_a_missing_definition() -> None:
    history = SchemaHistory()
    history.bootstrap({T.key: T}, BOOT)
    history.apply_ddl("DROP TABLE t", "shop", at(100))
    history.apply_ddl("CREATE TABLE t (id INT PRIMARY KEY)", "shop", at(200))
    history.apply_ddl("DROP TABLE t", "shop", at(300))
    cols = columns_at([("s", "shop", "t", o) for o in (50, 150, 250, 350, 360)])
    found = row_definitions(cols, range(5), history)
    assert [None if d is None else d.column_names for d in found.values()] == [
        ("id", "a"), None, ("id",), None, None,
    ]  # fmt: skip
