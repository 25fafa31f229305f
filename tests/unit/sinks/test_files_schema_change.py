"""The Parquet sinks under ``ddl: evolve | lenient | ignore | fail`` (pyarrow paths, no
Spark): the mirror's files follow the table's definitions through each kind of schema
change, replays change nothing, and the change log stops only under ``fail``."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwater.changes.schema import image_json
from headwater.errors import SinkError
from headwater.position import Position
from headwater.schema.model import Column, TableDef
from headwater.sinks.base import DdlMode
from headwater.sinks.files import MirrorConfig, ParquetChangeLog, ParquetLogConfig, ParquetMirror
from headwater.sinks.files.configuration import parse_mirror
from headwater.sinks.section import SinkContext, SinkSection


def col(name: str, data_type: str, column_type: str | None = None) -> Column:
    charset = "utf8mb4" if data_type in ("varchar", "text") else None
    return Column(name, data_type, column_type or data_type, charset=charset)


def table(name: str, *columns: Column) -> TableDef:
    return TableDef("db", name, (col("id", "int"), *columns), primary_key=("id",))


@dataclass(frozen=True)
class History:
    """Definitions by version: ``versions[i] = (sequence, tables)`` holds from the change
    with that sequence on (a DDL's own position sees its new definitions)."""

    versions: tuple[tuple[int, tuple[TableDef, ...]], ...]

    def table_at(self, database: str, name: str, position: Position) -> TableDef | None:
        current: tuple[TableDef, ...] = ()
        for seq, tables in self.versions:
            if position.offset >= 4 + seq:
                current = tables
        return next((t for t in current if (t.database, t.table) == (database, name)), None)


def change(
    op: str, seq: int, name: str = "", after: dict[str, Any] | None = None, sql: str = ""
) -> dict[str, Any]:
    return {
        "source": "s1",
        "database": "db",
        "table": name,
        "op": op,
        "ts_us": 1_714_000_000_000_000,
        "change_id": 0,
        "file_num": 1,
        "offset": 4 + seq,
        "event_index": 0,
        "gtid": "",
        "txn_id": f"1:{4 + seq}",
        "sequence": seq,
        "key": image_json(None if after is None else {"id": after.get("id")}),
        "before": None,
        "after": image_json(after),
        "schema_version": 1,
        "sql": sql or None,
    }


def ddl(seq: int, sql: str) -> dict[str, Any]:
    return change("ddl", seq, sql=sql)


def mirror_rows(mirror: ParquetMirror, name: str) -> tuple[list[str], list[dict[str, Any]]]:
    """What a schema-merging reader sees: the union of the files' columns, rows by id."""
    files = glob.glob(os.path.join(mirror.table_path("db", name), "*", "data.parquet"))
    tables = [pq.read_table(f) for f in files]
    if not tables:
        return [], []
    whole = pa.concat_tables(tables, promote_options="permissive")
    return sorted(whole.column_names), sorted(whole.to_pylist(), key=lambda r: r["id"])


V1 = table("t", col("a", "int"), col("b", "varchar", "varchar(10)"), col("n", "int"))
V2 = table("t", col("a", "int"), col("b", "varchar", "varchar(10)"), col("n", "int"),
           col("c", "int"))  # fmt: skip
V3 = table("t", col("a2", "int"), col("b", "varchar", "varchar(10)"), col("n", "decimal",
           "decimal(12,2)"), col("c", "int"))  # fmt: skip
V4 = table("t", col("a2", "int"), col("n", "decimal", "decimal(12,2)"), col("c", "int"))
HISTORY = History(((0, (V1,)), (10, (V2,)), (20, (V3,)), (30, (V4,))))


def workload() -> list[dict[str, Any]]:
    return [
        change("insert", 1, "t", {"id": 1, "a": 10, "b": "x", "n": 5}),
        change("insert", 2, "t", {"id": 2, "a": 20, "b": "y", "n": 6}),
        ddl(10, "ALTER TABLE t ADD COLUMN c INT"),
        change("insert", 11, "t", {"id": 3, "a": 30, "b": "z", "n": 7, "c": 1}),
        ddl(20, "ALTER TABLE t RENAME COLUMN a TO a2, MODIFY n DECIMAL(12,2)"),
        change("update", 21, "t", {"id": 1, "a2": 11, "b": "x", "n": "5.00", "c": 2}),
        ddl(30, "ALTER TABLE t DROP COLUMN b"),
        change("insert", 31, "t", {"id": 4, "a2": 40, "n": "8.00", "c": 3}),
    ]


def mirror(
    tmp_path: Path, mode: DdlMode, history: Any = HISTORY, buckets: int = 4
) -> ParquetMirror:
    return ParquetMirror(MirrorConfig(str(tmp_path), history, buckets=buckets, ddl=mode))


def test_evolve_renames_retypes_and_drops_columns_in_every_file(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.EVOLVE)
    sink.apply_changes(workload())
    names, rows = mirror_rows(sink, "t")
    assert names == ["a2", "c", "id", "n"]
    assert rows == [
        {"id": 1, "a2": 11, "n": Decimal("5.00"), "c": 2},
        {"id": 2, "a2": 20, "n": Decimal("6.00"), "c": None},
        {"id": 3, "a2": 30, "n": Decimal("7.00"), "c": 1},
        {"id": 4, "a2": 40, "n": Decimal("8.00"), "c": 3},
    ]
    for path in glob.glob(os.path.join(sink.table_path("db", "t"), "*", "data.parquet")):
        assert "b" not in pq.read_schema(path).names  # dropped from every file


def test_lenient_keeps_a_dropped_column_with_its_values(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.LENIENT)
    sink.apply_changes(workload())
    names, rows = mirror_rows(sink, "t")
    assert names == ["a2", "b", "c", "id", "n"]
    # INT -> DECIMAL is not a change lenient knows to widen: the files keep int64.
    assert [(r["id"], r["a2"], r["b"], r["n"]) for r in rows] == [
        (1, 11, "x", 5),
        (2, 20, "y", 6),
        (3, 30, "z", 7),
        (4, 40, None, 8),  # written after the drop: NULL
    ]


def test_lenient_refuses_a_value_the_kept_type_cannot_hold(tmp_path: Path) -> None:
    rows = workload()
    rows[5] = change("update", 21, "t", {"id": 1, "a2": 11, "b": "x", "n": "5.50", "c": 2})
    sink = mirror(tmp_path, DdlMode.LENIENT)
    with pytest.raises(SinkError, match=r"column 'n'.*set ddl to evolve"):
        sink.apply_changes(rows)


def test_a_replayed_batch_changes_nothing(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.EVOLVE)
    sink.apply_changes(workload())
    first = mirror_rows(sink, "t")
    sink.apply_changes(workload())
    assert mirror_rows(sink, "t") == first


def test_added_column_is_lazy_and_older_files_lack_it(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.EVOLVE, buckets=64)
    sink.apply_changes(workload()[:4])
    schemas = {
        tuple(pq.read_schema(p).names)
        for p in glob.glob(os.path.join(sink.table_path("db", "t"), "*", "data.parquet"))
    }
    # id 1 and 2 sit in partitions not rewritten since ADD COLUMN; id 3's has c.
    assert schemas == {("id", "a", "b", "n"), ("id", "a", "b", "n", "c")}
    rows = mirror_rows(sink, "t")[1]
    assert [r["c"] for r in rows] == [None, None, 1]


T = table("t", col("v", "varchar", "varchar(10)"))
U = table("u", col("v", "varchar", "varchar(10)"))
T_NEW = table("t", col("w", "bigint"))


def table_history() -> History:
    moved = TableDef("db", "t2", T.columns, primary_key=("id",))
    return History(((0, (T, U)), (10, (moved, U)), (20, (moved,)), (30, (moved, T_NEW))))


def table_workload() -> list[dict[str, Any]]:
    return [
        *(change("insert", n, "t", {"id": n, "v": f"t{n}"}) for n in range(1, 6)),
        change("insert", 6, "u", {"id": 1, "v": "u1"}),
        ddl(10, "RENAME TABLE t TO t2"),
        change("insert", 11, "t2", {"id": 9, "v": "t9"}),
        change("update", 12, "t2", {"id": 1, "v": "t1b"}),
        ddl(20, "DROP TABLE u"),
        ddl(30, "CREATE TABLE t (id INT PRIMARY KEY, w BIGINT)"),
        change("insert", 31, "t", {"id": 1, "w": 7}),
    ]


@pytest.mark.parametrize("replays", [1, 2])
def test_evolve_moves_a_renamed_table_and_removes_a_dropped_one(
    tmp_path: Path, replays: int
) -> None:
    sink = mirror(tmp_path, DdlMode.EVOLVE, table_history(), buckets=3)
    for _ in range(replays):
        sink.apply_changes(table_workload())
    rows = mirror_rows(sink, "t2")[1]
    assert [(r["id"], r["v"]) for r in rows] == [
        (1, "t1b"), (2, "t2"), (3, "t3"), (4, "t4"), (5, "t5"), (9, "t9")
    ]  # fmt: skip
    assert not os.path.exists(sink.table_path("db", "u"))
    assert mirror_rows(sink, "t") == (["id", "w"], [{"id": 1, "w": 7}])


def test_lenient_keeps_a_dropped_table(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.LENIENT, table_history(), buckets=3)
    sink.apply_changes(table_workload())
    assert mirror_rows(sink, "u") == (["id", "v"], [{"id": 1, "v": "u1"}])
    assert mirror_rows(sink, "t") == (["id", "w"], [{"id": 1, "w": 7}])  # created anew


def test_truncate_empties_the_table_under_every_mode_but_ignore(tmp_path: Path) -> None:
    rows = [
        *table_workload()[:5],
        ddl(7, "TRUNCATE TABLE t"),
        change("insert", 8, "t", {"id": 3, "v": "n"}),
    ]
    history = History(((0, (T, U)),))
    for mode in (DdlMode.EVOLVE, DdlMode.LENIENT):
        sink = mirror(tmp_path / mode, mode, history)
        sink.apply_changes(rows)
        assert mirror_rows(sink, "t")[1] == [{"id": 3, "v": "n"}]
    sink = mirror(tmp_path / "ignore", DdlMode.IGNORE, history)
    sink.apply_changes(rows)
    assert len(mirror_rows(sink, "t")[1]) == 5


def test_fail_stops_at_the_statement_after_the_rows_before_it(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.FAIL)
    with pytest.raises(SinkError, match=r"ddl: fail") as info:
        sink.apply_changes(workload())
    assert "ALTER TABLE t ADD COLUMN c INT" in str(info.value)
    assert [r["id"] for r in mirror_rows(sink, "t")[1]] == [1, 2]


def test_statements_not_about_data_never_stop_or_change_the_mirror(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.FAIL)
    sink.apply_changes([*workload()[:2], ddl(5, "CREATE USER 'u'@'%' IDENTIFIED BY '<redacted>'")])
    assert [r["id"] for r in mirror_rows(sink, "t")[1]] == [1, 2]


def test_change_log_keeps_writing_ddl_rows_unless_fail(tmp_path: Path) -> None:
    for mode in (DdlMode.EVOLVE, DdlMode.LENIENT, DdlMode.IGNORE):
        log = ParquetChangeLog(ParquetLogConfig(str(tmp_path / mode), ddl=mode))
        assert log.write_changes(workload(), 0) == 8
    log = ParquetChangeLog(ParquetLogConfig(str(tmp_path / "fail"), ddl=DdlMode.FAIL))
    with pytest.raises(SinkError, match=r"ADD COLUMN c INT.*|ddl: fail"):
        log.write_changes(workload(), 0)
    written = pq.read_table(str(tmp_path / "fail"), partitioning="hive")
    assert sorted(written.column("sequence").to_pylist()) == [1, 2]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, DdlMode.LENIENT),
        ({"ddl": "evolve"}, DdlMode.EVOLVE),
        ({"ddl": "apply"}, DdlMode.EVOLVE),
        ({"ddl": "skip"}, DdlMode.IGNORE),
        ({"ddl": "fail"}, DdlMode.FAIL),
    ],
)
def test_mirror_ddl_setting_parses_like_the_sql_sinks(
    tmp_path: Path, fields: dict[str, str], expected: DdlMode
) -> None:
    section = SinkSection(
        "parquet_mirror", (("path", str(tmp_path)), *fields.items()), 3, "sinks[0]"
    )
    context = SinkContext("p", tmp_path, schema=HISTORY)
    assert parse_mirror(section, context).ddl is expected


@pytest.mark.parametrize("mode", [DdlMode.EVOLVE, DdlMode.LENIENT])
def test_a_uri_path_gives_the_same_mirror_as_a_plain_one(tmp_path: Path, mode: DdlMode) -> None:
    # file:// goes through pyarrow.fs (sinks/files/fs.py), as hdfs:// or s3:// would
    for n, (history, rows, tables) in enumerate(
        [(HISTORY, workload(), ["t"]), (table_history(), table_workload(), ["t", "t2", "u"])]
    ):
        plain = mirror(tmp_path / f"plain{n}", mode, history, buckets=3)
        where = tmp_path / f"uri{n}"
        uri = ParquetMirror(MirrorConfig(f"file://{where}", history, buckets=3, ddl=mode))
        plain.apply_changes(rows)
        uri.apply_changes(rows)
        uri.apply_changes(rows)  # a replay
        read = mirror(where, mode, history, buckets=3)
        for name in tables:
            assert mirror_rows(read, name) == mirror_rows(plain, name), name


def test_drop_database_removes_its_tables_under_evolve_only(tmp_path: Path) -> None:
    history = History(((0, (T, U)), (10, ())))
    rows = [*table_workload()[:6], ddl(10, "DROP DATABASE db")]
    gone = mirror(tmp_path / "evolve", DdlMode.EVOLVE, history)
    gone.apply_changes(rows)
    assert mirror_rows(gone, "t") == ([], []) and mirror_rows(gone, "u") == ([], [])
    kept = mirror(tmp_path / "lenient", DdlMode.LENIENT, history)
    kept.apply_changes(rows)
    assert len(mirror_rows(kept, "t")[1]) == 5 and len(mirror_rows(kept, "u")[1]) == 1


def test_a_renamed_table_is_regrouped_into_the_new_tables_buckets(tmp_path: Path) -> None:
    sink = mirror(tmp_path, DdlMode.EVOLVE, table_history(), buckets=5)
    sink.apply_changes(table_workload()[:7])  # up to the rename
    # Later changes of moved rows find them where the new name's hash puts them: an
    # update of each, then reading, holds every key once.
    updates = [change("update", 20 + n, "t2", {"id": n, "v": f"u{n}"}) for n in range(1, 6)]
    sink.apply_changes(updates)
    rows = mirror_rows(sink, "t2")[1]
    assert [(r["id"], r["v"]) for r in rows] == [(n, f"u{n}") for n in range(1, 6)]


def test_rows_keyed_by_datetime_and_decimal_are_regrouped_where_updates_find_them(
    tmp_path: Path,
) -> None:
    key = (Column("at", "datetime", "datetime(6)"), Column("amt", "decimal", "decimal(8,2)"))
    old = TableDef("db", "k", (*key, col("v", "int")), primary_key=("at", "amt"))
    new = TableDef("db", "k2", old.columns, primary_key=("at", "amt"))
    history = History(((0, (old,)), (50, (new,))))

    def put(seq: int, table: str, n: int, v: int) -> dict[str, Any]:
        image = {"at": f"2024-02-29T13:01:0{n}.500000", "amt": f"{n}.50", "v": v}
        row = change("insert" if v == 0 else "update", seq, table, image)
        row["key"] = image_json({"at": image["at"], "amt": image["amt"]})
        return row

    sink = mirror(tmp_path, DdlMode.EVOLVE, history, buckets=7)
    sink.apply_changes([put(n, "k", n, 0) for n in range(1, 8)])
    sink.apply_changes([ddl(50, "RENAME TABLE k TO k2")])
    sink.apply_changes([put(60 + n, "k2", n, n) for n in range(1, 8)])
    files = glob.glob(os.path.join(sink.table_path("db", "k2"), "*", "data.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert sorted((r["amt"], r["v"]) for r in rows) == [
        (Decimal(f"{n}.50"), n) for n in range(1, 8)
    ]


def test_alter_table_rename_to_with_a_column_rename_keeps_the_values(tmp_path: Path) -> None:
    renamed = TableDef("db", "t2", (col("id", "int"), col("w", "varchar", "varchar(10)")),
                       primary_key=("id",))  # fmt: skip
    history = History(((0, (T,)), (10, (renamed,))))
    rows = [
        *table_workload()[:5],
        ddl(10, "ALTER TABLE t RENAME TO t2, RENAME COLUMN v TO w"),
        change("insert", 11, "t2", {"id": 9, "w": "t9"}),
    ]
    for mode in (DdlMode.EVOLVE, DdlMode.LENIENT):
        sink = mirror(tmp_path / mode, mode, history, buckets=3)
        sink.apply_changes(rows)
        names, got = mirror_rows(sink, "t2")
        assert names == ["id", "w"]
        assert [(r["id"], r["w"]) for r in got] == [(n, f"t{n}") for n in (1, 2, 3, 4, 5, 9)]
        assert mirror_rows(sink, "t") == ([], [])
