"""Helpers for the HTTP API tests: store records built from a live MariaDB binlog, and a
small HTTP client (urllib, real sockets)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from headwater.binlog.constants import EventType
from headwater.binlog.dump import render_json
from headwater.binlog.events import DecodeContext, parse_event
from headwater.binlog.framing import FormatDescription, iter_file_events
from headwater.binlog.tablemap import TableMap
from headwater.changes import decode_record, encode_events
from headwater.position import Position, binlog_file_number
from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.server.encoding import row_json
from headwater.store import FIRST_CHUNK, LAST_CHUNK, ChangeLog, Durability, Record, StoreOptions

__all__ = ["BIG_ROWS", "CHUNK_BYTES", "Api", "Http", "Stored", "binlog_records", "open_api"]


def _chunks(
    events: list[tuple[int, bytes, TableMap | None]], chunk_bytes: int
) -> Iterator[tuple[int, list[bytes]]]:
    """Split a transaction's events into runs of about ``chunk_bytes``; every run after the
    first starts with the TABLE_MAPs in force, so each decodes on its own (changes.py)."""
    maps: dict[int, bytes] = {}
    run: list[bytes] = []
    first = 0
    size = 0
    for index, data, tm in events:
        if run and size + len(data) > chunk_bytes and tm is None:
            yield first, run
            run, size, first = list(maps.values()), sum(len(m) for m in maps.values()), index
        if tm is not None:
            maps[tm.table_id] = data
        run.append(data)
        size += len(data)
    yield first, run


def binlog_records(
    server: MariadbSandbox, file: str, start: int, *, chunk_bytes: int | None = None
) -> tuple[FormatDescription, list[Record]]:
    """The file's transactions from ``start`` as records to append (MARIADB_GTID ... XID,
    or a GTID and one standalone QUERY). Transactions over ``chunk_bytes`` become chunk
    records. ``tables`` lists each touched table with a row count of 0 (not counted)."""
    fde: FormatDescription | None = None
    records: list[Record] = []
    current: list[tuple[int, bytes, TableMap | None]] = []
    ctx = DecodeContext()
    first_offset = ts = 0
    gtid = ""
    standalone = 0
    for raw in iter_file_events(server.binlog_path(file)):
        if raw.type_code == EventType.FORMAT_DESCRIPTION:
            fde = FormatDescription.parse(raw.data)
            ctx = DecodeContext(fde=fde)
            continue
        if raw.offset is None or raw.offset < start:
            continue
        if raw.type_code == EventType.MARIADB_GTID:
            current, first_offset, ts = [], raw.offset, raw.timestamp
            seq_no = int.from_bytes(raw.body[:8], "little")
            domain = int.from_bytes(raw.body[8:12], "little")
            gtid = f"{domain}-{raw.server_id}-{seq_no}"
            standalone = raw.body[12] & 1
        tm = None
        if raw.type_code == EventType.TABLE_MAP:
            event = parse_event(raw, ctx)
            assert isinstance(event, TableMap)
            tm = event
        current.append((len(current), bytes(raw.data), tm))
        if raw.type_code == EventType.XID or (raw.type_code == EventType.QUERY and standalone):
            names = sorted({f"{t.schema}.{t.table}" for _i, _d, t in current if t is not None})
            tables = tuple((n, 0) for n in names)
            file_num = binlog_file_number(file)
            if chunk_bytes is None or sum(len(d) for _i, d, _t in current) <= chunk_bytes:
                parts = [(0, [d for _i, d, _t in current])]
            else:
                parts = list(_chunks(current, chunk_bytes))
            for n, (index, events) in enumerate(parts):
                flags = (FIRST_CHUNK if n == 0 else 0) | (LAST_CHUNK if n == len(parts) - 1 else 0)
                records.append(
                    Record(
                        Position(0, file_num, first_offset, index),
                        encode_events(events),
                        ts_us=ts * 1_000_000,
                        gtid=gtid,
                        tables=tables,
                        flags=flags,
                        chunk_no=n,
                    )
                )
    assert fde is not None
    return fde, records


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class Http:
    """A real HTTP client for one server (urllib; errors come back as replies)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw_body: bytes | None = None,
        token: str | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        data = raw_body if raw_body is not None else None
        if body is not None:
            data = orjson.dumps(body)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        auth = token if token is not None else self.token
        if auth is not None:
            req.add_header("Authorization", f"Bearer {auth}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return Reply(resp.status, dict(resp.headers), resp.read())
        except urllib.error.HTTPError as e:
            return Reply(e.code, dict(e.headers), e.read())

    def get(self, path: str, **kw: Any) -> Reply:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.call("POST", path, body, **kw)

    def subscribe(self, **req: Any) -> str:
        reply = self.post("/v1/subscribe", req)
        assert reply.status == 200, reply.body
        token: str = reply.json()["checkpoint"]
        return token

    def fetch(self, checkpoint: str, **req: Any) -> Any:
        reply = self.post("/v1/fetch", {"checkpoint": checkpoint, **req})
        assert reply.status == 200, reply.body
        return reply.json()

    def drain(self, checkpoint: str, **req: Any) -> tuple[list[Any], str, int]:
        """Fetch until an empty batch; the items, the last checkpoint, the fetch count."""
        items: list[Any] = []
        fetches = 0
        while True:
            page = self.fetch(checkpoint, **req)
            fetches += 1
            batch = page.get("rows", page.get("records"))
            checkpoint = page["checkpoint"]
            if not batch and not page["more"]:
                return items, checkpoint, fetches
            items.extend(batch)


CHUNK_BYTES = 8192  # a rows event (about 8 KiB in MariaDB) is never split
BIG_ROWS = 3000


@dataclass
class Stored:
    fde: FormatDescription
    records: list[Record]


def log_workload(mariadb: MariadbSandbox, db: str) -> Iterator[Stored]:
    """Log the tests' workload in database ``db`` and yield it as records; drop it after.

    Tables ``acct`` (int key), ``pair`` (composite key) and ``nokey``; 30 multi-row
    transactions, an update, a delete, a transaction of ``BIG_ROWS`` rows (chunked) and
    DDL."""
    mariadb.execute(f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
    file, start = mariadb.binlog_position()
    mariadb.execute(
        "CREATE TABLE acct (id INT PRIMARY KEY, owner VARCHAR(20), bal DECIMAL(8,2),"
        " seen DATETIME(3), tag VARBINARY(4))",
        "CREATE TABLE pair (a INT, b VARCHAR(8), v INT, PRIMARY KEY (a, b))",
        "CREATE TABLE nokey (n INT, s VARCHAR(8))",
        database=db,
    )
    conn = mariadb.connect(db)
    with conn.cursor() as cur:
        for t in range(30):
            cur.execute("BEGIN")
            for i in range(t * 4 + 1, t * 4 + 5):
                cur.execute(
                    "INSERT INTO acct VALUES (%s, %s, %s, '2024-01-02 03:04:05.678', %s)",
                    (i, f"own{i % 7}", Decimal(i) / 4, bytes([i % 256, 0])),
                )
            cur.execute("INSERT INTO pair VALUES (%s, 'x', %s)", (t, t))
            cur.execute("COMMIT")
        cur.execute("UPDATE acct SET bal = bal + 1, seen = NULL WHERE id <= 20")
        cur.execute("DELETE FROM acct WHERE id > 110")
        cur.execute("INSERT INTO nokey VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        cur.execute(
            "INSERT INTO pair SELECT seq, REPEAT('y', seq % 8), seq"
            f" FROM seq_100_to_{99 + BIG_ROWS}"
        )
        cur.execute("ALTER TABLE nokey ADD COLUMN z INT")
        cur.execute("INSERT INTO nokey VALUES (4, 'd', 9)")
    conn.close()
    fde, records = binlog_records(mariadb, file, start, chunk_bytes=CHUNK_BYTES)
    assert any(not r.last_chunk for r in records), "the large transaction must be chunked"
    yield Stored(fde, records)
    mariadb.execute(f"DROP DATABASE IF EXISTS {db}")


@dataclass
class Api:
    http: Http
    server: HeadwaterServer
    log: ChangeLog
    stored: Stored
    status: dict[str, Any]

    @property
    def records(self) -> list[Record]:
        return self.stored.records

    def expected_rows(self, **decode: Any) -> list[dict[str, Any]]:
        rows = []
        for rec in self.log.reader("earliest"):
            for change in decode_record(rec, source="orders", fde=self.stored.fde, **decode):
                rows.append(orjson.loads(render_json(row_json(change))))
        return rows


def fill(path: Path, records: list[Record], **options: Any) -> ChangeLog:
    log = ChangeLog.open(str(path), StoreOptions(durability=Durability.NONE, **options))
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
    return log


@contextmanager
def open_api(
    stored: Stored, tmp_path: Path, options: ServerOptions | None = None, **store: Any
) -> Iterator[Api]:
    """A fresh change log holding ``stored`` and a server for it (task ``orders``)."""
    log = fill(tmp_path / "log", stored.records, **store)
    status: dict[str, Any] = {
        "events_in": 1234,
        "bytes_in": 56789,
        "transactions_stored": len(stored.records),
        "lag_seconds": 0.25,
        "gtid_set": stored.records[-1].gtid,
        "state": "running",
    }
    tasks = {"orders": TaskHandle(log=log, fde=lambda: stored.fde, status=lambda: status)}
    server = HeadwaterServer(tasks, options or ServerOptions()).start()
    try:
        yield Api(Http(server.url), server, log, stored, status)
    finally:
        server.close()
        log.close()
