"""Row decoding speed: headwater against python-mysql-replication, same binlog, same run.

A sandbox MariaDB (binlog ROW, FULL image and metadata) logs two workloads on
``orders(id BIGINT PK, customer_id INT, status VARCHAR(16), amount DECIMAL(12,2),
note VARCHAR(255), created_at DATETIME(6), updated_at TIMESTAMP(3), payload JSON)``:

* batched: 1000-row INSERTs, then 1000-row UPDATEs of every row, then 1000-row DELETEs;
* single: one-row transactions (INSERT, UPDATE, DELETE of each row).

Each decoder reads the dump of each workload from the server (non-blocking COM_BINLOG_DUMP)
and decodes every row into Python values; the time covers reading and decoding. The two
decoders' values are then compared row by row (outside the timing), so a fast wrong
decoder cannot pass.

The C baseline: Debian's ``mariadb-binlog -v`` (``--verbose`` rebuilds each row as a
pseudo-SQL comment, i.e. decodes every value; ``client/mysqlbinlog.cc`` and
``sql/log_event_client.cc``, ``Rows_log_event::print_verbose``) decodes the same range of
the same binlog file, read from the server's datadir, output to ``/dev/null``; it is
single-threaded, as headwater's decoder is (which also reads the dump over the socket).
Its rows/s count the rows headwater decoded in that range.

Printed before the last line: ``decode_vs_mariadb_binlog=<headwater rows/s /
mariadb-binlog rows/s>`` for the batched workload (#17's target: at least 1.0). Last line
(unchanged): ``decode_speedup_vs_pymysqlreplication=<x>`` for the batched workload (the
issue's target: at least 10).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import time
import warnings
from decimal import Decimal
from typing import Any

from headwater.binlog.client import BinlogClient, ClientOptions
from headwater.binlog.events import DecodeContext, parse_event
from headwater.binlog.rows import RowsEvent
from headwater.position import BinlogCoordinate
from headwater.sandbox import MariadbSandbox

SCHEMA = """CREATE TABLE bench.orders (
  id BIGINT PRIMARY KEY, customer_id INT, status VARCHAR(16), amount DECIMAL(12,2),
  note VARCHAR(255), created_at DATETIME(6), updated_at TIMESTAMP(3) NULL, payload JSON)"""


def _batched(server: MariadbSandbox, rows: int) -> None:
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


def _single(server: MariadbSandbox, rows: int, first_id: int) -> None:
    conn = server.connect("bench")
    with conn.cursor() as cur:
        for i in range(first_id, first_id + rows):
            cur.execute(
                "INSERT INTO orders VALUES (%s, %s, 'new', %s, 'single', NOW(6), NOW(3),"
                ' \'{"sku": "S1", "qty": 1}\')',
                (i, i % 9973, Decimal(i % 1000) / 4),
            )
        for i in range(first_id, first_id + rows):
            cur.execute("UPDATE orders SET status = 'paid' WHERE id = %s", (i,))
        for i in range(first_id, first_id + rows):
            cur.execute("DELETE FROM orders WHERE id = %s", (i,))
    conn.close()


def decode_headwater(server: MariadbSandbox, start: BinlogCoordinate) -> list[Any]:
    options = ClientOptions(
        host=server.host, port=server.port, user="root", server_id=901, start=start, blocking=False
    )
    ctx = DecodeContext()
    out: list[Any] = []
    with BinlogClient(options) as client:
        for ev in client.events():
            event = parse_event(ev.raw, ctx)
            if isinstance(event, RowsEvent):
                out.append((event.kind, event.rows))
    return out


def decode_pymysqlreplication(server: MariadbSandbox, start: BinlogCoordinate) -> list[Any]:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    stream = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": "root",
            "password": "",
        },
        server_id=902,
        log_file=start.file,
        log_pos=start.offset,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    out: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for ev in stream:
            out.append((type(ev).__name__, ev.rows))
    stream.close()
    return out


def _count(decoded: list[Any]) -> int:
    return sum(len(rows) for _kind, rows in decoded)


def _same_values(ours: list[Any], theirs: list[Any]) -> None:
    """Every row of both decoders, value by value (python-mysql-replication's TIMESTAMPs
    are naive local time: TZ is UTC here)."""
    flat_ours = [(kind, row) for kind, rows in ours for row in rows]
    flat_theirs = [(kind, row) for kind, rows in theirs for row in rows]
    assert len(flat_ours) == len(flat_theirs), (len(flat_ours), len(flat_theirs))
    names = ("id", "customer_id", "status", "amount", "note", "created_at", "updated_at", "payload")

    def norm(values: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            v.astimezone(dt.UTC).replace(tzinfo=None)
            if isinstance(v, dt.datetime) and v.tzinfo
            else v
            for v in values
        )

    for (kind, row), (_, their) in zip(flat_ours, flat_theirs, strict=True):
        if kind == "update":
            pairs = [(row[0], their["before_values"]), (row[1], their["after_values"])]
        else:
            pairs = [(row, their["values"])]
        for mine, image in pairs:
            expected = tuple(image[n] for n in names)
            assert norm(mine) == expected, f"{kind}: {norm(mine)} != {expected}"


def time_mariadb_binlog(
    server: MariadbSandbox, start: BinlogCoordinate, stop: BinlogCoordinate
) -> float:
    """Seconds ``mariadb-binlog -v`` takes to decode ``[start, stop)`` of the server's
    binlog file (the workload's events; output to /dev/null)."""
    if start.file != stop.file:
        raise SystemExit(f"the workload spans binlog files {start.file}..{stop.file}")
    tool = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    if tool is None:
        raise SystemExit("mariadb-binlog not found (Debian's mariadb-client package)")
    argv = [tool, "--no-defaults", "-v", f"--start-position={start.offset}",
            f"--stop-position={stop.offset}", str(server.binlog_path(start.file))]  # fmt: skip
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(argv, stdout=sink, check=True)
    return time.perf_counter() - t0


def measure(server: MariadbSandbox, label: str, start: BinlogCoordinate) -> tuple[float, float]:
    """``(speedup over python-mysql-replication, ratio to mariadb-binlog)``."""
    stop = BinlogCoordinate(*server.binlog_position())
    t_c = time_mariadb_binlog(server, start, stop)
    t0 = time.perf_counter()
    theirs = decode_pymysqlreplication(server, start)
    t_theirs = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = decode_headwater(server, start)
    t_ours = time.perf_counter() - t0
    _same_values(ours, theirs)
    n = _count(ours)
    print(
        f"{label}: {n} row changes; python-mysql-replication {n / t_theirs:,.0f} rows/s, "
        f"headwater {n / t_ours:,.0f} rows/s, speedup {t_theirs / t_ours:.1f}x; "
        f"mariadb-binlog -v {n / t_c:,.0f} rows/s, headwater/mariadb-binlog {t_c / t_ours:.2f}"
    )
    return t_theirs / t_ours, t_c / t_ours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (under a minute)")
    parser.add_argument("--rows", type=int, help="rows in the batched workload")
    args = parser.parse_args(argv)
    rows = args.rows or (30_000 if args.quick else 200_000)
    single = 2_000 if args.quick else 10_000
    os.environ["TZ"] = "UTC"
    time.tzset()
    server = MariadbSandbox().start()
    try:
        server.execute("CREATE DATABASE bench", SCHEMA)
        start = BinlogCoordinate(*server.binlog_position())
        _batched(server, rows)
        speedup, vs_c = measure(server, "batched (1000-row events)", start)
        start = BinlogCoordinate(*server.binlog_position())
        _single(server, single, rows + 1)
        measure(server, "single-row transactions", start)
    finally:
        server.stop()
    print(f"decode_vs_mariadb_binlog={vs_c:.2f}")
    print(f"decode_speedup_vs_pymysqlreplication={speedup:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
