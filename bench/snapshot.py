"""Snapshot: rows/s of ``headwater snapshot`` into MariaDB against ``mariadb-dump | mariadb``.

Starts a sandbox source MariaDB (binlog on) and a target MariaDB, fills ``bench.t`` with N
rows (2 000 000; ``--quick`` 200 000), starts a reader task on the source, then in the
same run:

* ``dump``: ``mariadb-dump --single-transaction --skip-lock-tables bench t | mariadb
  bench_dump`` (Debian's client tools), timed end to end;
* ``headwater``: a snapshot of ``bench.t`` (chunks of ``--chunk-rows``, Spark ``local[2]``
  started before the clock, its Python workers not) through the MySQL sink into
  ``bench_hw`` (tables created by the sink, 2 shards), timed from plan to the last wave's
  commit. The pipeline only renames the database, so chunks take the snapshot's bulk
  path (``LOAD DATA`` text formatted by the source, docs/operations.md "Snapshots").

Both targets are compared with the source (row count and checksum) before a rate counts.
Last line: ``snapshot_vs_dump_reload=<headwater rows/s / dump rows/s>``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from headwater.config import FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.connections import SourceConnection
from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.snapshots import run_snapshot
from headwater.position import BinlogCoordinate
from headwater.reader.task import ReaderTask
from headwater.sandbox import MariadbSandbox, SandboxOptions
from headwater.snapshot import SnapshotOptions
from headwater.spark.session import build_session

TABLE = (
    "CREATE TABLE {db}.t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64) NULL,"
    " c DECIMAL(10,2) NULL, ts BIGINT NOT NULL)"
)


def checksum(server: MariadbSandbox, db: str) -> tuple[int, int]:
    rows = server.query(
        f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', id, a, COALESCE(b, '-'),"
        f" COALESCE(c, '-'), ts))), 0) FROM {db}.t"
    )
    return int(rows[0][0]), int(rows[0][1])


def dump_reload(source: MariadbSandbox, target: MariadbSandbox) -> float:
    t0 = time.perf_counter()
    dump = subprocess.Popen(
        ["mariadb-dump", "--single-transaction", "--skip-lock-tables", "-h", source.host,
         "-P", str(source.port), "-u", "root", "bench", "t"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    load = subprocess.run(
        ["mariadb", "-h", target.host, "-P", str(target.port), "-u", "root", "bench_dump"],
        stdin=dump.stdout,
        check=True,
    )
    assert dump.stdout is not None
    dump.stdout.close()
    if dump.wait() != 0 or load.returncode != 0:
        raise SystemExit("mariadb-dump | mariadb failed")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--chunk-rows", type=int, default=None)
    args = ap.parse_args()
    rows = args.rows or (200_000 if args.quick else 2_000_000)
    chunk_rows = args.chunk_rows or max(10_000, rows // 40)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-snapshot-"))
    source = MariadbSandbox(SandboxOptions()).start()
    target = MariadbSandbox(SandboxOptions(server_id=2, log_bin=False)).start()
    task = None
    thread: threading.Thread | None = None
    ratio = 0.0
    try:
        source.execute("CREATE DATABASE bench", TABLE.format(db="bench"))
        source.execute(
            "INSERT INTO bench.t SELECT seq, seq % 1000, CONCAT('row-', seq, '-', MD5(seq)),"
            f" (seq % 100000) / 100, seq * 7 FROM seq_1_to_{rows}",
            database="bench",
        )
        expected = checksum(source, "bench")
        target.execute("CREATE DATABASE bench_dump")
        start = source.binlog_position()
        config = SourceConfig(
            name="bench",
            hosts=(HostConfig(source.host, source.port),),
            user="root",
            server_id=4243,
            start=StartConfig("file", coordinate=BinlogCoordinate(*start)),
            filters=FilterConfig(include=(r"bench\..*",)),
            state_interval=0.05,
            heartbeat_period=0.5,
        )
        task = ReaderTask(config, tmp / "task")
        thread = threading.Thread(target=task.run, daemon=True)
        thread.start()
        source.execute("CREATE TABLE bench.marker (id INT PRIMARY KEY)")

        dump_s = dump_reload(source, target)
        assert checksum(target, "bench_dump") == expected, "dump target differs"
        dump_rate = rows / dump_s
        print(f"dump | reload: {dump_s:.2f} s, {dump_rate:,.0f} rows/s")

        pipeline = parse_pipeline_config(
            f"name: bench-snapshot\nsource:\n  path: {tmp / 'task'}\n"
            f"checkpoint: {tmp / 'ck'}\n"
            "transforms:\n  - rename_database: {bench: bench_hw}\n"
            f"sinks:\n  - type: mysql\n    host: {target.host}\n    port: {target.port}\n"
            "    user: root\n    create_tables: true\n    shards: 2\n    batch_rows: 2000\n",
            file="bench.yaml",
        )
        spark = build_session("local[2]", "headwater-bench-snapshot")
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(1).collect()  # JVM and session up before the clock
        t0 = time.perf_counter()
        result = run_snapshot(
            spark,
            pipeline,
            connection=SourceConnection(source.host, source.port, "root"),
            tables="bench.t",
            options=SnapshotOptions(chunk_rows=chunk_rows, wave_chunks=4, timeout_s=120),
        )
        hw_s = time.perf_counter() - t0
        assert checksum(target, "bench_hw") == expected, "headwater target differs"
        hw_rate = rows / hw_s
        print(
            f"headwater snapshot: {hw_s:.2f} s, {hw_rate:,.0f} rows/s "
            f"({result.progress['chunks_total']} chunks of {chunk_rows})"
        )
        ratio = hw_rate / dump_rate
    finally:
        if task is not None:
            task.request_stop()
        if thread is not None:
            thread.join(10)  # before the source goes away, so the task stops quietly
        source.stop()
        target.stop()
    print(f"snapshot_vs_dump_reload={ratio:.2f}")


if __name__ == "__main__":
    main()
