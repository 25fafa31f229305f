"""The Spark source's executor work on its own: ``read_slice`` of a recorded log, without Spark.

A sandbox MariaDB (binlog ROW, FULL image and metadata) logs the workload of
bench/decode.py on ``orders(id BIGINT PK, customer_id INT, status VARCHAR(16),
amount DECIMAL(12,2), note VARCHAR(255), created_at DATETIME(6), updated_at TIMESTAMP(3),
payload JSON)``: 1000-row INSERTs, then 1000-row UPDATEs of every row, then 1000-row
DELETEs (3 x N change rows). A reader task captures it into a task directory; then, on that
log, in the same process and alternating round by round (the machine's load moves both
alike):

* ``python``: :func:`headwater.spark.partitions.read_slice` as it runs where the extension
  is not built: image JSON rendered by the Python path (one dict per image through orjson,
  ``_images_python``) into lists that ``pyarrow.array`` converts;
* ``headwater``: the same with ``headwater._native._imagejson``: images rendered in C
  straight into the Arrow string buffers.

Both build the per-event columns as Arrow runs (partitions.py ``_Columns``); so the ratio
is the C renderer's share alone, not the whole change from the row-list columns.

Both read the whole log as one slice into Arrow record batches (the batches an executor
hands to Spark), after one untimed round of each (imports, caches); the two outputs are
compared (every column of every batch) before a figure counts. Times are the process's CPU
time (``time.process_time``: on a loaded shared machine wall time mostly measures waiting
for a core); wall times are printed beside them. Printed: each path's median us per
change row over the rounds, and the load average. Last line:
``source_decode_speedup=<python us/row / headwater us/row>`` (CPU time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from headwater.config import FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.position import BinlogCoordinate
from headwater.reader.task import ReaderTask
from headwater.sandbox import MariadbSandbox
from headwater.spark import partitions
from headwater.spark.offsets import parse_options
from headwater.spark.source import HeadwaterReader

SCHEMA = """CREATE TABLE bench.orders (
  id BIGINT PRIMARY KEY, customer_id INT, status VARCHAR(16), amount DECIMAL(12,2),
  note VARCHAR(255), created_at DATETIME(6), updated_at TIMESTAMP(3) NULL, payload JSON)"""


def workload(server: MariadbSandbox, rows: int) -> None:
    """bench/decode.py's batched workload: inserts, updates of every row, deletes."""
    conn = server.connect("bench")
    with conn.cursor() as cur:
        for lo in range(1, rows + 1, 1000):
            hi = min(lo + 999, rows)
            cur.execute(
                "INSERT INTO orders SELECT seq, seq % 9973, ELT(1 + seq % 4, 'new', 'paid',"
                " 'shipped', 'returned'), (seq % 100000) / 100 - 250, CONCAT('note ', MD5(seq)),"
                " TIMESTAMP('2024-01-01') + INTERVAL seq SECOND + INTERVAL seq % 999999"
                " MICROSECOND, TIMESTAMP('2024-06-01') + INTERVAL seq MINUTE,"
                " JSON_OBJECT('sku', CONCAT('S', seq % 500), 'qty', seq % 7, 'tags',"
                f" JSON_ARRAY('a', 'b'))  FROM seq_{lo}_to_{hi}"
            )
        for lo in range(1, rows + 1, 1000):
            cur.execute(
                "UPDATE orders SET status = 'paid', amount = amount + 1.25,"
                " updated_at = updated_at + INTERVAL 1 DAY"
                f" WHERE id BETWEEN {lo} AND {lo + 999}"
            )
        for lo in range(1, rows + 1, 1000):
            cur.execute(f"DELETE FROM orders WHERE id BETWEEN {lo} AND {lo + 999}")
    conn.close()


def capture(server: MariadbSandbox, task_dir: Path, rows: int) -> None:
    """Run a reader task over the workload until it has stored the whole of it."""
    server.execute("FLUSH BINARY LOGS")
    file, begin = server.binlog_position()
    config = SourceConfig(
        name="bench",
        hosts=(HostConfig(server.host, server.port),),
        user="root",
        server_id=4245,
        start=StartConfig("file", coordinate=BinlogCoordinate(file, begin)),
        filters=FilterConfig(include=(r"bench\..*",)),
        state_interval=0.05,
        heartbeat_period=0.5,
    )
    task = ReaderTask(config, task_dir)
    thread = threading.Thread(target=task.run, daemon=True)
    thread.start()
    try:
        server.execute("CREATE DATABASE bench", SCHEMA)
        workload(server, rows)
        gtid = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
        deadline = time.monotonic() + 600
        while task.gtid_set is None or str(task.gtid_set) != gtid:
            if task.state == "failed":
                raise SystemExit(f"reader failed: {task.error}")
            if time.monotonic() > deadline:
                raise SystemExit("the reader did not catch up in 600 s")
            time.sleep(0.05)
    finally:
        task.request_stop()
        thread.join(10)


def read_all(part: Any) -> tuple[float, float, list[Any]]:
    """CPU seconds, wall seconds and the record batches of reading ``part``."""
    c0, w0 = time.process_time(), time.perf_counter()
    batches = list(partitions.read_slice(part))
    return time.process_time() - c0, time.perf_counter() - w0, batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=None, help="rows inserted (3x change rows)")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    rows = args.rows or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (3 if args.quick else 5)

    task_dir = Path(tempfile.mkdtemp(prefix="hw-bench-source-decode-")) / "task"
    server = MariadbSandbox().start()
    try:
        capture(server, task_dir, rows)
    finally:
        server.stop()
    (part,) = HeadwaterReader(
        parse_options(
            {"path": str(task_dir), "partitions": "1", "tables": "bench.orders", "ddl": "false"}
        )
    ).partitions()

    native = (partitions._render_block, partitions._JsonBuilder)
    if native[0] is None:
        raise SystemExit("headwater._native._imagejson is not built (make setup)")
    times: dict[str, list[float]] = {"python": [], "headwater": []}
    walls: dict[str, list[float]] = {"python": [], "headwater": []}
    outputs: dict[str, list[Any]] = {}
    try:
        for round_no in range(rounds + 1):
            for name in ("python", "headwater"):
                # The Python path: what runs where the extension is not built.
                use = native if name == "headwater" else (None, None)
                partitions._render_block, partitions._JsonBuilder = use  # type: ignore[assignment]
                cpu, wall, batches = read_all(part)
                if round_no:  # round 0 warms up
                    times[name].append(cpu)
                    walls[name].append(wall)
                outputs[name] = batches
    finally:
        partitions._render_block, partitions._JsonBuilder = native  # type: ignore[assignment]
    changes = sum(b.num_rows for b in outputs["headwater"])
    if changes != 3 * rows:
        raise SystemExit(f"read {changes} change rows, expected {3 * rows}")
    py, c = outputs["python"], outputs["headwater"]
    if len(py) != len(c) or any(not a.equals(b) for a, b in zip(py, c, strict=True)):
        raise SystemExit("the two paths' record batches differ")
    us = {name: statistics.median(t) / changes * 1e6 for name, t in times.items()}
    print(f"log: {changes:,} change rows, {len(c)} record batches; load {os.getloadavg()[0]:.2f}")
    for name, per in us.items():
        spread = ", ".join(f"{t / changes * 1e6:.2f}" for t in times[name])
        wall = statistics.median(walls[name]) / changes * 1e6
        print(f"{name}: {per:.2f} us/row CPU (rounds: {spread}); wall {wall:.2f} us/row")
    print(f"source_decode_speedup={us['python'] / us['headwater']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
