"""A reader task directory captured from the live MariaDB, for the Spark source tests.

The workload (database ``spark_src``): ``typed`` (one row per type edge case),
``acct`` (60 small transactions of inserts, updates and deletes), a large transaction the
reader stores as several chunk records, and DDL. The expected change rows are computed
independently of the source: every stored record decoded with ``decode_record`` (the
task's fde.bin and schema history) and rendered with ``change_row_values``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.binlog.framing import FormatDescription
from headwater.changes import decode_record
from headwater.changes.schema import change_row_values
from headwater.config import FilterConfig
from headwater.sandbox import MariadbSandbox
from headwater.schema.ddlscope import ddl_scope
from headwater.schema.history import SchemaHistory
from headwater.store import ChangeLog, Durability, Record, StoreOptions
from tests.integration.test_reader_capture import (
    Running,
    source_config,
    start_at,
    stored_records,
    wait_caught_up,
)

DB = "spark_src"
TASK = "shop"

TYPED_DDL = f"""CREATE TABLE {DB}.typed (
  id BIGINT UNSIGNED PRIMARY KEY, i INT, ti TINYINT, u INT UNSIGNED, d DECIMAL(12,4),
  f DOUBLE, dt DATETIME(6), ts TIMESTAMP(3) NULL, dd DATE, tm TIME(2),
  l1 VARCHAR(20) CHARACTER SET latin1, u8 VARCHAR(20) CHARACTER SET utf8mb4, b BLOB,
  e ENUM('red','green'), s SET('x','y','z'), j JSON, yr YEAR, bt BIT(8))"""

TYPED_ROWS = [
    "(18446744073709551615, -2147483648, -128, 4294967295, -12345678.9012, 1.5e300,"
    " '2024-02-29 13:01:02.500001', '2022-04-20 22:18:04.123', '2024-02-29', '-838:59:59.00',"
    " 'caf\u00e9 \u00e0 la', 'snow \u2603 \U0001f600', x'00ff10', 'green', 'x,z',"
    " '{\"a\": [1, 2]}', 2155, b'10100101')",
    "(0, 2147483647, 127, 0, 0.0000, -0.25, '1000-01-01 00:00:00', '1970-01-02 00:00:00',"
    " '1000-01-01', '100:00:00.05', '', '', x'', 'red', '', '[]', 1901, b'0')",
    "(7, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL)",
]


@dataclass
class Captured:
    """The task directory and what it must read as."""

    task_dir: Path
    fde: FormatDescription
    records: list[Record]

    def history(self) -> SchemaHistory:
        copy = self.task_dir.parent / "schema-copy.jsonl"
        shutil.copyfile(self.task_dir / "schema.jsonl", copy)
        history = SchemaHistory.open(copy)
        history.close()
        return history

    def expected(
        self, *, tables: Any = None, first_seq: int = 1, source: str = TASK
    ) -> list[tuple[Any, ...]]:
        history = self.history()
        out = []
        for rec in self.records:
            if rec.seq < first_seq:
                continue
            for change in decode_record(
                rec,
                source=source,
                fde=self.fde,
                schema=history,
                want=tables,
                want_ddl=None if tables is None else _ddl_oracle(tables),
            ):
                out.append(change_row_values(change))
        return out


def _ddl_oracle(tables: Any) -> Any:
    """A DDL statement is expected when it is about data and touches a wanted table, or a
    database the filter wants whole (``tables(db, "*")``), by the classifier's objects."""

    def want(sql: str, default_db: str) -> bool:
        scope = ddl_scope(sql, default_db)
        return scope.about_data and any(
            tables(db, "*" if table is None else table) for db, table in scope.objects
        )

    return want


_CAPTURED: dict[int, Captured] = {}


def capture(mariadb: MariadbSandbox, base: Path) -> Captured:
    """Run a reader task over the workload once per server; return its directory once
    caught up (the Spark source test modules share it: capturing takes seconds)."""
    if id(mariadb) not in _CAPTURED:
        _CAPTURED[id(mariadb)] = _capture(mariadb, base)
    return _CAPTURED[id(mariadb)]


def _capture(mariadb: MariadbSandbox, base: Path) -> Captured:
    mariadb.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}")
    task_dir = base / TASK
    config = source_config(
        mariadb,
        TASK,
        start=start_at(mariadb),
        filters=FilterConfig(include=(rf"{DB}\..*",)),
        chunk_bytes=16 * 1024,
    )
    run = Running(config, task_dir)
    try:
        mariadb.execute(
            TYPED_DDL,
            "CREATE TABLE acct (id INT PRIMARY KEY, owner VARCHAR(60), bal DECIMAL(8,2))",
            database=DB,
        )
        conn = mariadb.connect(DB)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            for row in TYPED_ROWS:
                cur.execute(f"INSERT INTO typed VALUES {row}")
            cur.execute("UPDATE typed SET i = i - 1, u8 = 'upd\u00e9' WHERE id = 0")
            for t in range(60):
                cur.execute("BEGIN")
                for i in range(t * 3, t * 3 + 3):
                    cur.execute(f"INSERT INTO acct VALUES ({i}, 'o{i}', {i}.25)")
                if t % 4 == 0:
                    cur.execute(f"UPDATE acct SET bal = bal + 1 WHERE id = {t}")
                if t % 5 == 0:
                    cur.execute(f"DELETE FROM acct WHERE id = {t * 3 + 1}")
                cur.execute("COMMIT")
            cur.execute("BEGIN")
            for i in range(1000, 1600):
                cur.execute(f"INSERT INTO acct VALUES ({i}, 'bulk{i}-{'x' * 40}', 1.00)")
            cur.execute("COMMIT")
            cur.execute("ALTER TABLE acct ADD COLUMN note VARCHAR(10)")
            for t in range(10):
                cur.execute(f"INSERT INTO acct VALUES ({2000 + t}, 'late', 2.00, 'n{t}')")
        conn.close()
        wait_caught_up(run.task, mariadb)
    finally:
        run.stop()
    records = stored_records(task_dir)
    fde = FormatDescription.parse((task_dir / "fde.bin").read_bytes())
    return Captured(task_dir, fde, records)


def copy_task(captured: Captured, dest: Path, upto: int) -> ChangeLog:
    """A task directory holding the first ``upto`` records of ``captured`` (same seqs),
    with the same fde.bin and schema.jsonl; returns its log open for appending more."""
    dest.mkdir(parents=True)
    for name in ("fde.bin", "schema.jsonl"):
        shutil.copyfile(captured.task_dir / name, dest / name)
    log = ChangeLog.open(str(dest / "changes"), StoreOptions(durability=Durability.NONE))
    append(log, captured.records[:upto])
    return log


def append(log: ChangeLog, records: list[Record]) -> None:
    for rec in records:
        log.append(
            Record(
                rec.position,
                rec.payload,
                rec.ts_us,
                rec.gtid,
                rec.tables,
                rec.schema_version,
                rec.flags,
                rec.chunk_no,
            )
        )
    log.flush()


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    """A DataFrame's rows as tuples in ``sequence`` order, ``commit_ts`` as in
    change_row_values (aware UTC; Spark hands back naive local times)."""
    import datetime as dt

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    out = []
    for row in df.orderBy("sequence").collect():
        values = list(row)
        values[5] = epoch + dt.timedelta(microseconds=row["ts_us"])
        out.append(tuple(values))
    return out
