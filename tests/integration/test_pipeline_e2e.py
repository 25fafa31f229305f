"""End to end: live MariaDB source -> reader task -> Spark pipeline -> MariaDB and PostgreSQL.

A seeded random workload (inserts, updates, deletes, primary key updates, NULL flips,
multi-table transactions) runs on the source; the reader captures it; the pipeline (real
local Spark, the headwater source, the SQL sinks) syncs database A into database B on a
second MariaDB and into schema B on PostgreSQL. After catch-up (``availableNow``) every
target table equals its source, row by row and by a checksum query per table. The helpers
here are shared by the other ``test_pipeline_*`` integration tests.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from headwater.config import FilterConfig
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_caught_up

# Python workers must import headwater.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

TABLES = {
    "orders": (
        "CREATE TABLE orders (id INT PRIMARY KEY, customer VARCHAR(40) NOT NULL,"
        " amount DECIMAL(10,2) NULL, note VARCHAR(100) NULL, version INT NOT NULL)",
        ("id",),
        ("id", "customer", "amount", "note", "version"),
    ),
    "items": (
        "CREATE TABLE items (order_id INT NOT NULL, line INT NOT NULL, sku VARCHAR(20) NOT NULL,"
        " qty INT NULL, version INT NOT NULL, PRIMARY KEY (order_id, line))",
        ("order_id", "line"),
        ("order_id", "line", "sku", "qty", "version"),
    ),
}


# --- workload -----------------------------------------------------------------------------


@dataclass
class Workload:
    """Seeded random transactions on the source. Keys are never reused (inserts and key
    updates take fresh values) and every update bumps ``version``, so each (key, version)
    state happens once in the source's history."""

    server: MariadbSandbox
    db: str
    seed: int
    rng: random.Random = field(init=False)
    next_id: int = 1
    orders: list[int] = field(default_factory=list)
    items: list[tuple[int, int]] = field(default_factory=list)
    statements: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def create(self) -> None:
        self.server.execute(*(ddl for ddl, _, _ in TABLES.values()), database=self.db)

    def _fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def _statement(self) -> str:
        r = self.rng
        kind = r.random()
        amount = "NULL" if r.random() < 0.2 else f"{r.randint(0, 99999) / 100:.2f}"
        note = "NULL" if r.random() < 0.3 else f"'n{r.randint(0, 10**6)}'"
        if kind < 0.30 or len(self.orders) < 5:
            oid = self._fresh()
            self.orders.append(oid)
            return f"INSERT INTO orders VALUES ({oid}, 'c{r.randint(0, 50)}', {amount}, {note}, 0)"
        oid = r.choice(self.orders)
        if kind < 0.50:
            return (
                f"UPDATE orders SET amount = {amount}, note = {note}, version = version + 1"
                f" WHERE id = {oid}"
            )
        if kind < 0.55:
            new = self._fresh()
            self.orders[self.orders.index(oid)] = new
            return f"UPDATE orders SET id = {new}, version = version + 1 WHERE id = {oid}"
        if kind < 0.62:
            self.orders.remove(oid)
            return f"DELETE FROM orders WHERE id = {oid}"
        qty = "NULL" if r.random() < 0.25 else str(r.randint(1, 9))
        if kind < 0.80 or not self.items:
            key = (oid, self._fresh())
            self.items.append(key)
            return f"INSERT INTO items VALUES ({key[0]}, {key[1]}, 's{r.randint(0, 99)}', {qty}, 0)"
        key = r.choice(self.items)
        where = f"order_id = {key[0]} AND line = {key[1]}"
        if kind < 0.90:
            return f"UPDATE items SET qty = {qty}, version = version + 1 WHERE {where}"
        if kind < 0.94:
            new = (key[0], self._fresh())
            self.items[self.items.index(key)] = new
            return f"UPDATE items SET line = {new[1]}, version = version + 1 WHERE {where}"
        self.items.remove(key)
        return f"DELETE FROM items WHERE {where}"

    def run(self, transactions: int) -> None:
        conn = self.server.connect(database=self.db)
        try:
            with conn.cursor() as cur:
                for _ in range(transactions):
                    cur.execute("BEGIN")
                    for _ in range(self.rng.randint(1, 4)):
                        cur.execute(self._statement())
                        self.statements += 1
                    cur.execute("COMMIT")
        finally:
            conn.close()


# --- comparing ----------------------------------------------------------------------------


def _mysql_rows(server: MariadbSandbox, db: str, table: str) -> list[tuple[str, ...]]:
    _, key, columns = TABLES[table]
    cols = ", ".join(f"CAST({c} AS CHAR)" for c in columns)
    rows = server.query(f"SELECT {cols} FROM `{db}`.`{table}` ORDER BY {', '.join(key)}")
    return [tuple(v if v is None else str(v) for v in row) for row in rows]


def _pg_rows(pg: dict[str, Any], schema: str, table: str) -> list[tuple[str, ...]]:
    _, key, columns = TABLES[table]
    cols = ", ".join(f"t.{c}::text" for c in columns)
    order = ", ".join(f"t.{c}" for c in key)  # not the text output columns of the same name
    with psycopg.connect(**pg) as conn:
        rows = conn.execute(
            f'SELECT {cols} FROM "{schema}"."{table}" t ORDER BY {order}'
        ).fetchall()
    return [tuple(row) for row in rows]


def _checksum_expr(table: str) -> tuple[str, str]:
    """The same per-table checksum in MariaDB and PostgreSQL SQL: md5 over the ordered
    rows rendered as text, NULL written as \\N."""
    _, key, columns = TABLES[table]
    my = ", ".join(f"COALESCE(CAST({c} AS CHAR), '\\\\N')" for c in columns)
    pg = ", ".join(f"COALESCE({c}::text, '\\N')" for c in columns)
    order = ", ".join(key)
    return (
        f"SELECT COUNT(*), MD5(COALESCE(GROUP_CONCAT(CONCAT_WS('|', {my}) ORDER BY {order}"
        " SEPARATOR '\\n'), ''))",
        f"SELECT COUNT(*), md5(COALESCE(string_agg(concat_ws('|', {pg}), E'\\n' ORDER BY {order}),"
        " ''))",
    )


def mysql_checksum(server: MariadbSandbox, db: str, table: str) -> tuple[int, str]:
    conn = server.connect(database=db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION group_concat_max_len = 1 << 30")
            cur.execute(f"{_checksum_expr(table)[0]} FROM `{table}`")
            count, digest = cur.fetchone()
    finally:
        conn.close()
    return int(count), str(digest)


def pg_checksum(pg: dict[str, Any], schema: str, table: str) -> tuple[int, str]:
    with psycopg.connect(**pg) as conn:
        row = conn.execute(f'{_checksum_expr(table)[1]} FROM "{schema}"."{table}"').fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def assert_synced(
    source: MariadbSandbox,
    src_db: str,
    target: MariadbSandbox | None,
    pg: dict[str, Any] | None,
    dst: str,
) -> None:
    """Every table equal row by row and by checksum, in each given target."""
    for table in TABLES:
        expected = _mysql_rows(source, src_db, table)
        checksum = mysql_checksum(source, src_db, table)
        assert expected, f"the workload left {table} empty"
        if target is not None:
            assert _mysql_rows(target, dst, table) == expected, f"MariaDB {dst}.{table}"
            assert mysql_checksum(target, dst, table) == checksum
        if pg is not None:
            assert _pg_rows(pg, dst, table) == expected, f"PostgreSQL {dst}.{table}"
            assert pg_checksum(pg, dst, table) == checksum


# --- reader and pipeline ------------------------------------------------------------------


@pytest.fixture
def reader(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[tuple[Running, Path]]:
    """The source tables, then a reader task capturing ``db`` (in a thread)."""
    task_dir = tmp_path / "task"
    config = source_config(
        mariadb,
        f"e2e_{abs(hash(db)) % 10**6}",
        start=start_at(mariadb),
        filters=FilterConfig(include=(f"{db}\\..*",)),
    )
    Workload(mariadb, db, 0).create()
    running = Running(config, task_dir)
    try:
        yield running, task_dir
    finally:
        running.stop()


def write_config(
    path: Path,
    task_dir: Path,
    *,
    src_db: str,
    dst_db: str,
    target: MariadbSandbox | None = None,
    pg: dict[str, Any] | None = None,
    extra_transforms: str = "",
    name: str = "e2e",
    ddl: str = "apply",
    sliced: bool = True,
) -> Path:
    """The pipeline file. ``sliced``: every micro-batch is cut into slices (the SQL sinks'
    shuffle path); else the source's default, where a small micro-batch is one slice and
    the SQL sinks apply it without a shuffle."""
    sinks = ""
    if target is not None:
        sinks += (
            f"  - type: mysql\n    host: {target.host}\n    port: {target.port}\n"
            f"    user: root\n    create_tables: true\n    shards: 2\n    ddl: {ddl}\n"
        )
    if pg is not None:
        sinks += (
            f"  - type: postgres\n    host: {pg['host']}\n    port: {pg.get('port', 5432)}\n"
            f"    user: {pg['user']}\n    database: {pg['dbname']}\n"
            "    create_tables: true\n    shards: 2\n"
        )
    path.write_text(
        f"name: {name}\n"
        f"source:\n  path: {task_dir}\n"
        + ("  options: {minBytesPerPartition: '0'}\n" if sliced else "")
        + f"checkpoint: {path.parent / ('ck_' + name)}\n"
        "progress: 1\n"
        "transforms:\n"
        f"  - rename_database: {{{src_db}: {dst_db}}}\n"
        f"{extra_transforms}"
        f"sinks:\n{sinks}"
    )
    return path


def run_available_now(spark: SparkSession, config_path: Path) -> None:
    runner = PipelineRunner(load_pipeline_config(config_path), spark=spark)
    query = runner.start(available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()


def test_random_workload_syncs_into_mariadb_and_postgres(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    postgres: dict[str, Any],
    db: str,
    reader: tuple[Running, Path],
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    dst = f"{db}_copy"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
    config = write_config(
        tmp_path / "pipeline.yaml", task_dir, src_db=db, dst_db=dst, target=mariadb_target,
        pg=postgres,
    )  # fmt: skip
    # create_tables: true on PostgreSQL: the shards create the schema and tables
    # concurrently (serialized by the sink's advisory lock).
    workload = Workload(mariadb, db, seed=5)
    workload.run(150)
    wait_caught_up(running.task, mariadb)
    run_available_now(spark, config)
    assert_synced(mariadb, db, mariadb_target, postgres, dst)
    # A second round continues from the checkpoint.
    workload.run(150)
    wait_caught_up(running.task, mariadb)
    run_available_now(spark, config)
    assert_synced(mariadb, db, mariadb_target, postgres, dst)
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
