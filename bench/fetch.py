"""Throughput of ``POST /v1/fetch`` to one client: decoded JSON rows/s and raw records/s.

A sandbox MariaDB (binlog ROW, FULL image and metadata) logs ``rows`` inserts into
``orders(id BIGINT PK, customer_id INT, status VARCHAR(16), amount DECIMAL(12,2),
note VARCHAR(255), created_at DATETIME(6))`` in transactions of 100 rows; its binlog is
grouped into one store record per transaction (as the reader stores them) and appended to
a change log. A ``HeadwaterServer`` on 127.0.0.1 serves it; one client in the same process
(``http.client``, one keep-alive connection) fetches everything from ``earliest``, first
raw records (format ``raw``: JSON with base64 payloads), then decoded rows (format
``json``). Every row and record is counted and checked against the log.

For reference the script also times ``decode_record`` + JSON rendering with no HTTP
(the server's ceiling on this machine). Last two lines::

    fetch_raw_records_per_s=<n>
    fetch_json_rows_per_s=<n>
"""

from __future__ import annotations

import argparse
import http.client
import sys
import tempfile
import time
from typing import Any

import orjson

from headwater.binlog.constants import EventType
from headwater.binlog.dump import render_json
from headwater.binlog.framing import FormatDescription, iter_file_events
from headwater.changes import decode_record, encode_events
from headwater.position import Position, binlog_file_number
from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.server.encoding import row_json
from headwater.store import ChangeLog, Durability, Record, StoreOptions

SCHEMA = """CREATE TABLE bench.orders (
  id BIGINT PRIMARY KEY, customer_id INT, status VARCHAR(16), amount DECIMAL(12,2),
  note VARCHAR(255), created_at DATETIME(6))"""


def workload(server: MariadbSandbox, rows: int) -> tuple[str, int]:
    server.execute("CREATE DATABASE bench", SCHEMA)
    file, start = server.binlog_position()
    conn = server.connect("bench")
    with conn.cursor() as cur:
        for lo in range(1, rows + 1, 100):
            hi = min(lo + 99, rows)
            cur.execute(
                "INSERT INTO orders SELECT seq, seq % 9973, ELT(1 + seq % 4, 'new', 'paid',"
                " 'shipped', 'returned'), (seq % 100000) / 100 - 250, CONCAT('note ', MD5(seq)),"
                " TIMESTAMP('2024-01-01') + INTERVAL seq SECOND + INTERVAL seq % 999999"
                f" MICROSECOND FROM seq_{lo}_to_{hi}"
            )
    conn.close()
    return file, start


def records(
    server: MariadbSandbox, file: str, start: int
) -> tuple[FormatDescription, list[Record]]:
    """One record per transaction (MARIADB_GTID ... XID)."""
    fde: FormatDescription | None = None
    out: list[Record] = []
    current: list[bytes] = []
    first = ts = 0
    gtid = ""
    for raw in iter_file_events(server.binlog_path(file)):
        if raw.type_code == EventType.FORMAT_DESCRIPTION:
            fde = FormatDescription.parse(raw.data)
            continue
        if raw.offset is None or raw.offset < start:
            continue
        if raw.type_code == EventType.MARIADB_GTID:
            current, first, ts = [], raw.offset, raw.timestamp
            seq_no = int.from_bytes(raw.body[:8], "little")
            gtid = f"{int.from_bytes(raw.body[8:12], 'little')}-{raw.server_id}-{seq_no}"
        current.append(bytes(raw.data))
        if raw.type_code == EventType.XID:
            pos = Position(0, binlog_file_number(file), first)
            tables = (("bench.orders", 0),)
            out.append(Record(pos, encode_events(current), ts * 1_000_000, gtid, tables))
    assert fde is not None
    return fde, out


def drain(conn: http.client.HTTPConnection, checkpoint: str, max_rows: int) -> tuple[int, int]:
    """Fetch until empty; (items, fetches)."""
    items = fetches = 0
    while True:
        body = orjson.dumps({"checkpoint": checkpoint, "max_rows": max_rows, "max_bytes": 64 << 20})
        conn.request("POST", "/v1/fetch", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200, data[:200]
        page: dict[str, Any] = orjson.loads(data)
        fetches += 1
        batch = page.get("rows", page.get("records"))
        checkpoint = page["checkpoint"]
        if not batch:
            return items, fetches
        items += len(batch)


def subscribe(conn: http.client.HTTPConnection, fmt: str) -> str:
    conn.request("POST", "/v1/subscribe", orjson.dumps({"task": "bench", "format": fmt}))
    resp = conn.getresponse()
    token: str = orjson.loads(resp.read())["checkpoint"]
    return token


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (under a minute)")
    parser.add_argument("--rows", type=int, default=None, help="rows to insert (100000)")
    args = parser.parse_args(argv)
    n_rows = args.rows or (20_000 if args.quick else 100_000)

    server = MariadbSandbox().start()
    try:
        file, start = workload(server, n_rows)
        fde, recs = records(server, file, start)
    finally:
        server.stop()
    print(f"logged {n_rows} rows in {len(recs)} transactions", file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        log = ChangeLog.open(tmp, StoreOptions(durability=Durability.NONE))
        for rec in recs:
            log.append_nowait(rec)
        log.flush()

        began = time.perf_counter()
        n = 0
        for rec in log.reader("earliest"):
            for change in decode_record(rec, source="bench", fde=fde):
                render_json(row_json(change))
                n += 1
        decode_s = time.perf_counter() - began
        assert n == n_rows, n

        tasks = {"bench": TaskHandle(log=log, fde=fde)}
        opts = ServerOptions(max_rows=100_000, max_bytes=256 << 20)
        with HeadwaterServer(tasks, opts).start() as api:
            host, port = api.address
            conn = http.client.HTTPConnection(host, port, timeout=60)
            began = time.perf_counter()
            n_raw, f_raw = drain(conn, subscribe(conn, "raw"), 1000)
            raw_s = time.perf_counter() - began
            began = time.perf_counter()
            n_json, f_json = drain(conn, subscribe(conn, "json"), 5000)
            json_s = time.perf_counter() - began
            conn.close()
        log.close()
    assert n_raw == len(recs) and n_json == n_rows, (n_raw, n_json)
    print(f"decode_record + render_json, no HTTP: {n_rows / decode_s:,.0f} rows/s")
    print(f"raw: {n_raw} records in {f_raw} fetches, {raw_s:.2f} s")
    print(f"json: {n_json} rows in {f_json} fetches, {json_s:.2f} s")
    print(f"json_fetch_vs_decode_only={decode_s / json_s:.2f}")
    print(f"fetch_raw_records_per_s={n_raw / raw_s:.0f}")
    print(f"fetch_json_rows_per_s={n_json / json_s:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
