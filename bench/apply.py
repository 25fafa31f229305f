"""Apply step of the SQL sinks: CPU and time per change of a shard's transaction.

What an executor does with one shard's routed change rows in a micro-batch
(``headwater.sinks.glue._apply_partition``: Arrow columns in, collapse per key, plan,
convert, write, checkpoint, commit), without Spark and without decoding, on the change
rows of ``bench/pipeline.py``'s workload (``--rows`` inserts in 1000-row events, updates
of half, deletes of a tenth: 1.6 changes a row) rendered as the decoder renders them.
``--single``: the single-row-transaction shape (``bench/pipeline.py``'s ``--single``
workload: ``--rows`` one-row INSERTs, then UPDATEs of the first half, every change at a
position of its own), where every change looks its table definition up at its own
position.

Table definitions come as a pipeline's sinks get them: the pipeline's view
(:class:`~headwater.spark.transforms.TransformedSchema`, no transforms) over the reader
task's ``schema.jsonl`` (:class:`~headwater.sinks.SchemaFile`), written here by
:class:`~headwater.schema.history.SchemaHistory` (``--static-schema``: definitions given
inline, no file).

Targets: a MariaDB sandbox (binlog off, as the pipeline bench's target) and the machine's
PostgreSQL (``HEADWATER_TEST_POSTGRES``, database ``hw_bench_apply``); PostgreSQL twice,
with its bulk path (``COPY`` into a temporary table, one set-based statement) and with
batched statements only (``bulk_rows = 0``), alternating round by round so that both see
the same load. Each round applies a fresh batch (new sequences; the same keys, so rounds
after the first update rows that exist). Printed per target: the minimum over
``--rounds`` of the Python process's CPU per change (the figure the load moves least) and
the median wall time per change (the target's own work included).

Last line: ``apply_pg_copy_vs_statements=<statement path wall / bulk path wall>``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import orjson
import pyarrow as pa

from headwater.connections import TargetConnection
from headwater.position import Position
from headwater.sandbox import MariadbSandbox, SandboxOptions
from headwater.schema.history import SchemaHistory
from headwater.schema.model import Column, TableDef
from headwater.sinks import SchemaFile, SchemaSource, StaticSchema
from headwater.sinks.glue import _apply_partition
from headwater.sinks.merge import ROLE_KEY
from headwater.sinks.mysql import MysqlSink, MysqlSinkConfig
from headwater.sinks.postgres import PostgresSink, PostgresSinkConfig
from headwater.sinks.postgres.client import PostgresDialect
from headwater.sinks.sql import SqlSink
from headwater.spark.transforms import TransformedSchema

PG_DSN = os.environ.get("HEADWATER_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres")
PG_DB = "hw_bench_apply"
PART = 7  # the partition key of shard 0 (any int: the batch is one shard's)

TABLE = TableDef(
    "bench",
    "t",
    (
        Column("id", "int", "int", nullable=False),
        Column("a", "int", "int", nullable=False),
        Column("b", "varchar", "varchar(64)", charset="utf8mb4"),
        Column("c", "decimal", "decimal(10,2)"),
        Column("ts", "bigint", "bigint", nullable=False),
    ),
    primary_key=("id",),
)


def schema_source(static: bool, directory: str) -> SchemaSource:
    """The table definitions the sinks get (module docstring)."""
    if static:
        return StaticSchema((TABLE,))
    path = os.path.join(directory, "schema.jsonl")
    with SchemaHistory.open(path) as history:
        history.bootstrap({TABLE.key: TABLE}, Position(0, 1, 4))
    return TransformedSchema(SchemaFile(path), ())


def batch(rows: int, first_seq: int, single: bool = False) -> pa.RecordBatch:
    """One shard's routed change rows of the workload, as the glue's Arrow batch
    (``single``: the single-row-transaction workload, a position per change)."""
    out: dict[str, list[Any]] = {k: [] for k in ("op", "sequence", "offset", "key", "after")}

    def add(op: str, i: int, image: dict[str, Any] | None) -> None:
        n = len(out["op"])
        out["op"].append(op)
        out["sequence"].append(first_seq + n)
        # Rows of one event share its position; a single-row transaction has its own.
        out["offset"].append(4 + (n * 400 if single else n // 100 * 8000))
        out["key"].append(orjson.dumps({"id": i}).decode())
        out["after"].append(None if image is None else orjson.dumps(image).decode())

    for i in range(1, rows + 1):
        md5 = hashlib.md5(str(i).encode()).hexdigest()
        add("insert", i, {"id": i, "a": i * 3, "b": md5, "c": f"{i / 7:.2f}", "ts": 0})
    if single:
        for i in range(1, rows // 2 + 1):
            add("update", i, {"id": i, "a": i * 3 + 1, "b": None, "c": f"{i / 7:.2f}", "ts": 0})
    else:
        for i in range(1, rows + 1, 2):
            add("update", i, {"id": i, "a": i * 3 + 1, "b": None, "c": f"{i / 7:.2f}", "ts": 0})
        for i in range(10, rows + 1, 10):
            add("delete", i, None)
    n = len(out["op"])
    columns = {
        "source": pa.array(["bench"] * n),
        "database": pa.array(["bench"] * n),
        "table": pa.array(["t"] * n),
        "op": pa.array(out["op"]),
        "sequence": pa.array(out["sequence"], pa.int64()),
        "change_id": pa.array([0] * n, pa.int64()),
        "file_num": pa.array([1] * n, pa.int64()),
        "offset": pa.array(out["offset"], pa.int64()),
        "event_index": pa.array([0] * n, pa.int32()),
        "key": pa.array(out["key"]),
        "after": pa.array(out["after"]),
        "sql": pa.array([None] * n, pa.string()),
        "ts_us": pa.array([0] * n, pa.int64()),
        "role": pa.array([ROLE_KEY] * n, pa.int32()),
        "part": pa.array([PART] * n, pa.int32()),
    }
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


class StatementsOnly(PostgresDialect):
    bulk_rows = 0


class StatementSink(PostgresSink):
    dialect = StatementsOnly()


def pg_sinks(schema: SchemaSource) -> tuple[PostgresSink, PostgresSink]:
    import psycopg

    admin = psycopg.connect(f"{PG_DSN} dbname=postgres", autocommit=True)
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{PG_DB}"')
    finally:
        admin.close()
    pg = dict(p.split("=", 1) for p in PG_DSN.split())
    connection = TargetConnection(
        host=pg["host"], port=int(pg.get("port", 5432)), user=pg["user"], database=PG_DB
    )

    def config(name: str) -> PostgresSinkConfig:
        return PostgresSinkConfig(
            pipeline=name,
            connection=connection,
            schema=schema,
            database_map=(("bench", name),),
            create_tables=True,
            batch_rows=5000,
        )

    return PostgresSink(config("bulk")), StatementSink(config("statements"))


def mysql_sink(server: MariadbSandbox, schema: SchemaSource) -> MysqlSink:
    return MysqlSink(
        MysqlSinkConfig(
            pipeline="bench",
            connection=TargetConnection(host=server.host, port=server.port, user="root"),
            schema=schema,
            create_tables=True,
            batch_rows=5000,
        )
    )


def apply_once(sink: SqlSink, data: pa.RecordBatch, batch_id: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one shard transaction of ``data``."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = list(_apply_partition(sink, batch_id, [PART], [data]))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert out and out[0].num_rows == 1, "one shard result expected"
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--single", action="store_true", help="single-row transactions")
    ap.add_argument("--static-schema", action="store_true", help="definitions inline")
    args = ap.parse_args()
    rows = args.rows or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (5 if args.quick else 9)
    server = MariadbSandbox(
        SandboxOptions(server_id=2, log_bin=False, extra=("--innodb-flush-log-at-trx-commit=1",))
    ).start()
    try:
        server.execute("CREATE DATABASE bench")
        schema = schema_source(args.static_schema, tempfile.mkdtemp(prefix="hw-bench-apply-"))
        sinks: dict[str, SqlSink] = {"MariaDB": mysql_sink(server, schema)}
        sinks["PostgreSQL COPY"], sinks["PostgreSQL statements"] = pg_sinks(schema)
        for sink in sinks.values():
            sink.setup()
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in sinks}
        changes = 0
        for r in range(rounds):
            data = batch(rows, 1 + r * 10 * rows, args.single)
            changes = data.num_rows
            for name, sink in sinks.items():
                figures[name].append(apply_once(sink, data, r))
        load = os.getloadavg()[0]
        wall: dict[str, float] = {}
        for name, runs in figures.items():
            cpu = min(c for c, _ in runs) / changes * 1e6
            wall[name] = statistics.median(w for _, w in runs) / changes * 1e6
            print(
                f"{name}: {changes} changes a transaction, CPU {cpu:.2f} us/change (min of"
                f" {rounds}), wall {wall[name]:.2f} us/change (median)"
            )
        shape = "single-row transactions" if args.single else "batched"
        print(f"{shape}, {type(schema).__name__} schema; load average {load:.1f}")
        ratio = wall["PostgreSQL statements"] / wall["PostgreSQL COPY"]
        print(f"apply_pg_copy_vs_statements={ratio:.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
