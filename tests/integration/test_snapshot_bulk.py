"""Snapshots through the bulk path (source-formatted LOAD DATA text, loaded into a MariaDB
target) copy every column type MariaDB has exactly, replace what a key range held in the
target before, and give way to the general path when a transform edits values.

Equality is checked the way ``headwater verify`` checks it (chunked checksums of a
canonical text of every value, then the differing keys), not through the sink's eyes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from headwater.config import FilterConfig
from headwater.connections import SourceConnection
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.snapshots import run_snapshot
from headwater.sandbox import MariadbSandbox
from headwater.schema.introspect import read_tables
from headwater.sinks.mysql.bulk import line_sql
from headwater.snapshot import SnapshotOptions
from headwater.snapshot.bulk import read_lines
from headwater.snapshot.state import SnapshotState
from headwater.verify import VerifyOptions, parse_endpoint, verify
from tests.integration.test_reader_capture import (
    Running,
    source_config,
    start_at,
    wait_caught_up,
)
from tests.integration.type_catalog import CASES

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

#: An ENUM's empty string is the error value (index 0): MariaDB loads it only with a
#: warning, which fails a bulk load (docs/operations.md, "Snapshots").
VALUES = {case.name: tuple(v for v in case.values if not (case.name == "enum" and v == "''"))
          for case in CASES}  # fmt: skip
ROWS = max(len(v) for v in VALUES.values()) + 1  # and one row of NULLs everywhere


def fill_every_type(server: MariadbSandbox, db: str) -> None:
    """``every_type``: one column per type of the catalog; row ``i`` holds each column's
    ``i``-th value (NULL past the end), the last row NULL in every column."""
    columns = ", ".join(f"`c_{case.name}` {case.sql_type}" for case in CASES)
    rows = []
    for i in range(ROWS):
        values = [VALUES[case.name][i] if i < len(VALUES[case.name]) else "NULL"
                  for case in CASES]  # fmt: skip
        rows.append(f"({i + 1}, {', '.join(values)})")
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # the catalog's edge values
            cur.execute(f"CREATE TABLE every_type (id INT PRIMARY KEY, {columns})")
            cur.execute(f"INSERT INTO every_type VALUES {', '.join(rows)}")
        conn.commit()
    finally:
        conn.close()


@pytest.fixture
def every_type(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[Path]:
    """``db.every_type`` filled, and a reader task capturing ``db``."""
    fill_every_type(mariadb, db)
    config = source_config(
        mariadb,
        f"bulk_{abs(hash(db)) % 10**6}",
        start=start_at(mariadb),
        filters=FilterConfig(include=(f"{db}\\..*",)),
    )
    running = Running(config, tmp_path / "task")
    try:
        mariadb.execute("CREATE TABLE marker (id INT PRIMARY KEY)", database=db)
        wait_caught_up(running.task, mariadb)
        yield tmp_path / "task"
    finally:
        running.stop()


def pipeline(tmp_path: Path, task_dir: Path, src: str, dst: str, target: MariadbSandbox,
             extra: str = "") -> Path:  # fmt: skip
    path = tmp_path / "p.yaml"
    path.write_text(
        f"name: bulk\nsource:\n  path: {task_dir}\ncheckpoint: {tmp_path / 'ck'}\n"
        f"transforms:\n  - rename_database: {{{src}: {dst}}}\n{extra}"
        f"sinks:\n  - type: mysql\n    host: {target.host}\n    port: {target.port}\n"
        "    user: root\n    create_tables: true\n    shards: 2\n    ddl: skip\n"
        "    checkpoint_database: hw_bulk\n"
    )
    return path


def snapshot(
    spark: SparkSession, config_path: Path, source: MariadbSandbox, db: str
) -> SnapshotState:
    config = load_pipeline_config(config_path)
    run_snapshot(
        spark,
        config,
        connection=SourceConnection(source.host, source.port, "root"),
        tables=f"{db}.every_type",
        options=SnapshotOptions(chunk_rows=2, wave_chunks=3, timeout_s=30),
    )
    state = SnapshotState.load(str(config.checkpoint / "snapshot.json"))
    assert state is not None and not state.pending()
    return state


def mismatches(source: MariadbSandbox, db: str, target: MariadbSandbox, dst: str) -> list[str]:
    report = verify(
        parse_endpoint(f"{source.url}/{db}", role="source"),
        parse_endpoint(f"{target.url}/{dst}", role="target"),
        VerifyOptions(tables=(f"{db}.every_type",), database_map=((db, dst),), chunk_size=3),
    )
    (table,) = report.tables
    assert table.rows == ROWS
    problems = [] if table.problem is None else [table.problem]
    return problems + [f"{d.kind} {d.key} {d.columns}" for d in table.differences]


def test_bulk_snapshot_of_every_type_equals_the_source(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    every_type: Path,
    tmp_path: Path,
) -> None:
    dst = f"{db}_copy"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", "DROP DATABASE IF EXISTS hw_bulk")
    state = snapshot(spark, pipeline(tmp_path, every_type, db, dst, mariadb_target), mariadb, db)
    assert len(state.done) == (ROWS + 1) // 2
    assert {d["path"] for d in state.done.values()} == {"bulk"}
    assert sum(d["rows"] for d in state.done.values()) == ROWS
    assert mismatches(mariadb, db, mariadb_target, dst) == []
    # PyMySQL reads FLOAT as the server's 6-digit text: compare the exact values too.
    exact = "SELECT id, CAST(c_float AS DOUBLE), c_double FROM `{}`.every_type ORDER BY id"
    want = [tuple(r) for r in mariadb.query(exact.format(db))]
    assert [tuple(r) for r in mariadb_target.query(exact.format(dst))] == want
    assert (5, 3.1415927410125732, -2.25e100) in want


def test_bulk_load_replaces_what_the_target_held_in_the_chunk_range(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    every_type: Path,
    tmp_path: Path,
) -> None:
    """A target left with stale rows (a row changed since, a row deleted since, as after
    an interrupted earlier attempt) holds the source's rows after the snapshot."""
    dst = f"{db}_copy"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", "DROP DATABASE IF EXISTS hw_bulk")
    mariadb_target.execute(f"CREATE DATABASE `{dst}`")
    create = mariadb.query(f"SHOW CREATE TABLE `{db}`.every_type")[0][1]
    mariadb_target.execute(create, database=dst)
    mariadb_target.execute(
        f"INSERT INTO `{dst}`.every_type (id, c_int, c_varchar) VALUES"
        f" (1, 7, 'stale'), (3, 8, 'stale'), ({ROWS + 5}, 9, 'gone')",
    )
    assert mismatches(mariadb, db, mariadb_target, dst) != []
    state = snapshot(spark, pipeline(tmp_path, every_type, db, dst, mariadb_target), mariadb, db)
    assert {d["path"] for d in state.done.values()} == {"bulk"}
    assert mismatches(mariadb, db, mariadb_target, dst) == []
    assert mariadb_target.query(f"SELECT COUNT(*) FROM `{dst}`.every_type")[0][0] == ROWS


def test_a_transform_that_edits_values_keeps_the_general_path(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    every_type: Path,
    tmp_path: Path,
) -> None:
    dst = f"{db}_copy"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", "DROP DATABASE IF EXISTS hw_bulk")
    keep = "  - include: [id, c_int, c_varchar]\n"
    state = snapshot(
        spark, pipeline(tmp_path, every_type, db, dst, mariadb_target, keep), mariadb, db
    )
    assert {d["path"] for d in state.done.values()} == {"rows"}
    got = mariadb_target.query(f"SELECT id, c_int, c_varchar FROM `{dst}`.every_type ORDER BY id")
    want = mariadb.query(f"SELECT id, c_int, c_varchar FROM `{db}`.every_type ORDER BY id")
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    assert len(want) == ROWS


def test_a_chunk_longer_than_group_concat_allows_is_read_row_by_row(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    """The server truncates a GROUP_CONCAT longer than ``group_concat_max_len`` (with a
    warning only): the line count gives it away and the rows are read one by one."""
    fill_every_type(mariadb, db)
    conn = mariadb.connect(db)
    try:
        tdef = read_tables(conn, [db])[(db, "every_type")]
        line = line_sql(tdef)
        assert line is not None
        outputs = []
        for limit in (None, 100):
            path = tmp_path / f"lines-{limit}.tsv"
            with path.open("wb") as out:
                rows = read_lines(conn, line, f"`{db}`.every_type", "TRUE", [], out, limit)
            assert rows == ROWS
            outputs.append(path.read_bytes())
    finally:
        conn.close()
    whole, by_rows = outputs
    assert by_rows == whole
    assert whole.count(b"\n") == ROWS
