"""End to end with schema changes into Parquet: live MariaDB source -> reader -> pipeline
-> two Parquet mirrors, under ``ddl: evolve`` and ``ddl: lenient`` (issue #13).

The workload of :mod:`tests.integration.test_pipeline_ddl` (random DML around ADD / DROP /
MODIFY / RENAME COLUMN, RENAME TABLE, TRUNCATE, DROP then CREATE TABLE with another shape
and a new table) runs on the source; one pipeline run carries both mirrors and a Parquet
change log. Afterwards each mirror table, read across its files' different schemas by
Spark (``mergeSchema``) and by DuckDB (``union_by_name``), equals the source table:
under ``evolve`` on every column, under ``lenient`` on the source's columns, with the
dropped columns still there and NULL in rows written after the drop.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from headwater.config import FilterConfig
from headwater.sandbox import MariadbSandbox
from tests.integration.test_pipeline_ddl import Tables, _source_rows
from tests.integration.test_pipeline_e2e import run_available_now
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_caught_up

pytestmark = pytest.mark.integration


@pytest.fixture
def capture(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[tuple[Running, Path]]:
    task_dir = tmp_path / "task"
    config = source_config(
        mariadb,
        f"pq_{abs(hash(db)) % 10**6}",
        start=start_at(mariadb),
        filters=FilterConfig(include=(f"{db}\\..*",)),
    )
    running = Running(config, task_dir)
    try:
        yield running, task_dir
    finally:
        running.stop()


def _text(value: Any) -> str | None:
    """A value as MariaDB's ``CAST(... AS CHAR)`` spells it."""
    if value is None:
        return None
    if isinstance(value, decimal.Decimal | dt.date | int | str):
        return str(value)
    raise AssertionError(f"unexpected value {value!r}")


def _spark_rows(spark: SparkSession, path: Path, cols: list[str]) -> set[tuple[Any, ...]]:
    frame = spark.read.option("mergeSchema", "true").parquet(str(path))
    return {tuple(_text(v) for v in r) for r in frame.select(*cols).collect()}


def _spark_columns(spark: SparkSession, path: Path) -> set[str]:
    return set(spark.read.option("mergeSchema", "true").parquet(str(path)).columns)


def _duck(path: Path, select: str) -> list[tuple[Any, ...]]:
    import duckdb

    files = f"{path}/*/*.parquet"
    query = f"SELECT {select} FROM read_parquet('{files}', union_by_name = true,"
    return duckdb.sql(query + " hive_partitioning = true)").fetchall()


def _duck_rows(path: Path, cols: list[str]) -> set[tuple[Any, ...]]:
    names = ", ".join(f'"{c}"' for c in cols)
    return {tuple(_text(v) for v in r) for r in _duck(path, names)}


def _duck_columns(path: Path) -> set[str]:
    import duckdb

    files = f"{path}/*/*.parquet"
    rel = duckdb.sql(
        f"SELECT * FROM read_parquet('{files}', union_by_name = true, hive_partitioning = true)"
    )
    return set(rel.columns)


def test_parquet_mirrors_follow_schema_changes_readable_by_spark_and_duckdb(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    capture: tuple[Running, Path],
    tmp_path: Path,
) -> None:
    running, task_dir = capture
    t = Tables(mariadb, db, seed=31)
    t.create("a", {"c1": "int", "c2": "text", "c3": "dec"})
    t.create("b", {"v": "text"})
    t.create("c", {"x": "int", "y": "text"})
    t.run(60)
    t.ddl("ALTER TABLE a ADD COLUMN c4 INT NULL")
    t.columns["a"]["c4"] = "int"
    t.run(10)
    t.ddl("ALTER TABLE a DROP COLUMN c3")
    del t.columns["a"]["c3"]
    c3_dropped_after = t.next_id  # rows with a larger id were written without c3
    t.ddl("ALTER TABLE a MODIFY c2 VARCHAR(40)")
    t.ddl("ALTER TABLE a RENAME COLUMN c1 TO c1r")
    t.columns["a"] = {("c1r" if k == "c1" else k): v for k, v in t.columns["a"].items()}
    t.run(10)
    t.ddl("RENAME TABLE a TO a2")
    t.columns["a2"], t.keys["a2"] = t.columns.pop("a"), t.keys.pop("a")
    t.ddl("TRUNCATE TABLE b")
    t.keys["b"] = []
    t.ddl("DROP TABLE c")
    del t.columns["c"], t.keys["c"]
    t.create("c", {"z": "date", "w": "big"})
    t.create("d", {"q": "text"})
    t.run(60)
    t.ddl("ALTER TABLE d ADD COLUMN r BIGINT NULL")
    t.columns["d"]["r"] = "big"
    t.run(10)
    t.ddl("ALTER TABLE a2 DROP COLUMN c4", "ALTER TABLE c MODIFY w DECIMAL(20,0)")
    del t.columns["a2"]["c4"]
    c4_dropped_after = t.next_id
    t.run(10)
    wait_caught_up(running.task, mariadb)

    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"name: pq_ddl\nsource:\n  path: {task_dir}\n  tables: ['{db}.*']\n"
        f"checkpoint: {tmp_path / 'ck'}\nprogress: 1\nsinks:\n"
        f"  - {{type: parquet_mirror, path: '{tmp_path / 'ev'}', ddl: evolve, buckets: 4}}\n"
        f"  - {{type: parquet_mirror, path: '{tmp_path / 'le'}', ddl: lenient, buckets: 4}}\n"
        f"  - {{type: parquet_log, path: '{tmp_path / 'log'}', ddl: evolve}}\n"
    )
    run_available_now(spark, config)

    assert sorted(t.columns) == ["a2", "b", "c", "d"]
    # a moved to a2 (regrouped into a2's buckets), in both mirrors.
    for mirror in ("ev", "le"):
        assert {"a2", "c", "d"} <= {p.name for p in (tmp_path / mirror / db).iterdir()}
        assert not (tmp_path / mirror / db / "a").exists()
    for table, source_cols in ((n, ["id", *c]) for n, c in t.columns.items()):
        expected = _source_rows(mariadb, db, table, source_cols)
        ev, le = tmp_path / "ev" / db / table, tmp_path / "le" / db / table
        if not expected:  # b: truncated, no rows since
            assert not ev.exists() or not list(ev.glob("*/*.parquet")), table
            continue
        # evolve: every column of the source, nothing else.
        assert _spark_columns(spark, ev) == {*source_cols, "mirror_part"}, table
        assert _duck_columns(ev) == {*source_cols, "mirror_part"}, table
        assert _spark_rows(spark, ev, source_cols) == expected, f"evolve {table} (Spark)"
        assert _duck_rows(ev, source_cols) == expected, f"evolve {table} (DuckDB)"
        # lenient: equal on the source's columns.
        assert _spark_rows(spark, le, source_cols) == expected, f"lenient {table} (Spark)"
        assert _duck_rows(le, source_cols) == expected, f"lenient {table} (DuckDB)"
    # lenient kept the dropped columns; rows written after a drop have NULL there.
    le = tmp_path / "le" / db / "a2"
    assert {"c3", "c4"} <= _spark_columns(spark, le) & _duck_columns(le)
    for column, after in (("c3", c3_dropped_after), ("c4", c4_dropped_after)):
        where = f"FILTER (WHERE id > {after})"
        late = _duck(le, f'count(*) {where}, count("{column}") {where}')
        assert late[0][0] > 0, column
        assert late[0][1] == 0, column
        spark_late = (
            spark.read.option("mergeSchema", "true")
            .parquet(str(le))
            .where(f"id > {after} AND {column} IS NOT NULL")
            .count()
        )
        assert spark_late == 0, column
    # c was dropped and created with another shape: the old rows and columns are gone;
    # its w went from BIGINT to DECIMAL(20,0): retyped under evolve, kept under lenient.
    assert _duck(tmp_path / "ev" / db / "c", "typeof(w)")[0] == ("DECIMAL(20,0)",)
    assert _duck(tmp_path / "le" / db / "c", "typeof(w)")[0] == ("BIGINT",)
    assert _duck_columns(tmp_path / "le" / db / "c") == {"id", "z", "w", "mirror_part"}
    # Files of a table differ in schema across ADD COLUMN (d's r), yet read as one.
    schemas = {tuple(pq.read_schema(p).names) for p in (tmp_path / "ev" / db / "d").glob("*/*")}
    assert ("id", "q", "r") in schemas
    # The change log holds every change row and the DDL rows of the pipeline's tables.
    log = spark.read.parquet(str(tmp_path / "log"))
    assert log.where("op = 'ddl'").count() >= 12


@pytest.mark.parametrize(("driver_rows", "mode"), [(0, "evolve"), (50_000, "lenient")])
def test_write_batch_applies_schema_changes_between_the_rows_around_them(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    driver_rows: int,
    mode: str,
) -> None:
    """One Spark micro-batch holding rows, column changes, a rename, a drop and a
    re-created table equals the same changes applied one by one without Spark; with
    ``DRIVER_ROWS`` 0 every statement takes its own Spark job (the path of big batches),
    else the rest of the batch after the first statement goes on the driver."""
    from headwater.sinks import files
    from headwater.sinks.base import DdlMode
    from tests.integration.test_sink_spark import frame
    from tests.unit.sinks import test_files_schema_change as unit

    monkeypatch.setattr(files.mirror, "DRIVER_ROWS", driver_rows)
    for n, (history, rows, tables) in enumerate(
        [
            (unit.HISTORY, unit.workload(), ["t"]),
            (unit.table_history(), unit.table_workload(), ["t", "t2", "u"]),
        ]
    ):
        by_spark = unit.mirror(tmp_path / f"spark{n}", DdlMode(mode), history, buckets=3)
        by_spark.write_batch(frame(spark, rows, 3), 0)
        one_by_one = unit.mirror(tmp_path / f"local{n}", DdlMode(mode), history, buckets=3)
        for row in rows:
            one_by_one.apply_changes([row])
        for name in tables:
            expected = unit.mirror_rows(one_by_one, name)
            assert unit.mirror_rows(by_spark, name) == expected, (n, name)
        if driver_rows:
            by_spark.write_batch(frame(spark, rows, 2), 0)  # a replay changes nothing
            assert [unit.mirror_rows(by_spark, t) for t in tables] == [
                unit.mirror_rows(one_by_one, t) for t in tables
            ]
