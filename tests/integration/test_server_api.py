"""The HTTP API over a real socket: a change log filled from a live MariaDB binlog, a
``HeadwaterServer`` on 127.0.0.1 (free port), and urllib as the client.

The module's workload (one database, three tables) is logged once; each test gets a fresh
change log holding those transactions (a large one stored as chunk records) and its own
server.
"""

from __future__ import annotations

import base64
import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from headwater.sandbox import MariadbSandbox
from headwater.server import TaskHandle, pb
from headwater.store import ChangeLog, Record
from tests.integration.server_support import (
    BIG_ROWS,
    CHUNK_BYTES,
    Api,
    Stored,
    log_workload,
    open_api,
)

DB = "hw_server_api"


@pytest.fixture(scope="module")
def stored(mariadb: MariadbSandbox) -> Iterator[Stored]:
    yield from log_workload(mariadb, DB)


@pytest.fixture
def api(stored: Stored, tmp_path: Path) -> Iterator[Api]:
    with open_api(stored, tmp_path) as api:
        yield api


def test_info_reports_positions_gtids_lag_and_retained_range(api: Api) -> None:
    reply = api.http.get("/v1/info")
    assert reply.status == 200 and reply.headers["Content-Type"] == "application/json"
    info = reply.json()
    assert info["server"]["api"] == "v1" and "protobuf" in info["server"]["formats"]
    task = info["tasks"]["orders"]
    first, last = api.records[0], api.records[-1]
    assert task["earliest"] == {
        "seq": 1,
        "position": first.position.to_json(),
        "ts_us": first.ts_us,
        "gtid": first.gtid,
    }
    assert task["latest"]["seq"] == len(api.records)
    assert task["latest"]["gtid"] == last.gtid and task["gtid_set"] == last.gtid
    assert task["lag_seconds"] == 0.25 and task["status"]["state"] == "running"
    assert task["latest_age_seconds"] >= 0


def test_subscribe_resolves_every_kind_of_start(api: Api) -> None:
    records = api.records
    n = len(records)
    k = next(i for i, r in enumerate(records) if i > 5 and r.first_chunk) + 1  # a seq
    rec = records[k - 1]
    first_at_ts = next(i for i, r in enumerate(records) if r.ts_us >= rec.ts_us) + 1
    pos = rec.position.to_json()
    cases: list[tuple[Any, int]] = [
        ("earliest", 1),
        ("latest", n + 1),
        ({"seq": k}, k),
        ({"position": pos}, k),
        ({"position": str(rec.position)}, k),
        ({"timestamp_us": rec.ts_us}, first_at_ts),
        ({"gtid_set": rec.gtid}, k + 1),  # MariaDB: the first record not in the set
    ]
    for start, seq in cases:
        reply = api.http.post("/v1/subscribe", {"task": "orders", "start": start})
        assert reply.status == 200, (start, reply.body)
        doc = reply.json()
        assert doc["next"] == {"seq": seq, "row": 0}, start
        first = api.http.fetch(doc["checkpoint"], max_rows=1)
        if seq <= n:
            assert first["rows"][0]["sequence"] >> 24 == seq, start
        else:
            assert first["rows"] == [] and first["next"]["seq"] == seq


def test_fetch_pages_by_rows_and_every_row_arrives_once_in_order(api: Api) -> None:
    token = api.http.subscribe(task="orders")
    rows, _cp, fetches = api.http.drain(token, max_rows=7)
    expected = api.expected_rows()
    assert rows == expected
    assert fetches == -(-len(expected) // 7) + 1  # full pages, then one empty answer
    sequences = [r["sequence"] for r in rows]
    assert sequences == sorted(set(sequences))
    assert set(rows[0]) == {
        "source", "database", "table", "op", "ts_us", "position", "gtid", "txn_id",
        "sequence", "key", "before", "after", "schema_version", "sql",
    }  # fmt: skip
    acct = next(r for r in rows if r["table"] == "acct" and r["op"] == "insert")
    assert acct["after"] == {
        "id": 1,
        "owner": "own1",
        "bal": "0.25",
        "seen": "2024-01-02T03:04:05.678000",
        "tag": {"base64": base64.b64encode(b"\x01\x00").decode()},
    }
    assert acct["key"] == {"id": 1} and acct["before"] is None
    ddl = [r for r in rows if r["op"] == "ddl"]
    assert any("ALTER TABLE nokey" in r["sql"] for r in ddl)


def test_fetch_byte_limit_bounds_each_batch(api: Api) -> None:
    token = api.http.subscribe(task="orders", tables=[f"{DB}.acct"])
    limit = 700
    rows: list[Any] = []
    while True:
        page = api.http.fetch(token, max_bytes=limit, max_rows=10_000)
        token = page["checkpoint"]
        if not page["rows"]:
            break
        sizes = [len(orjson.dumps(r)) for r in page["rows"]]
        assert len(sizes) == 1 or sum(sizes) + len(sizes) - 1 <= limit
        rows.extend(page["rows"])
    assert rows == api.expected_rows(want=lambda d, t: t == "acct")  # DDL is not filtered


def test_large_transaction_is_delivered_chunk_by_chunk_with_checkpoints_inside(api: Api) -> None:
    chunked = [i + 1 for i, r in enumerate(api.records) if not (r.first_chunk and r.last_chunk)]
    assert len(chunked) >= 4
    token = api.http.subscribe(task="orders", start={"seq": chunked[0]}, tables=[f"{DB}.pair"])
    seen: list[int] = []
    inside = 0
    while True:
        page = api.http.fetch(token, max_rows=250)
        token = page["checkpoint"]
        nxt = page["next"]
        if nxt["seq"] in chunked and nxt["row"] > 0:
            inside += 1  # a checkpoint in the middle of one chunk record
        if not page["rows"]:
            break
        seen.extend(r["after"]["a"] for r in page["rows"] if r["op"] == "insert")
        if nxt["seq"] > chunked[-1]:
            break
    assert seen == list(range(100, 100 + BIG_ROWS))
    assert inside > 0
    # Every chunk record is bounded; none holds the whole transaction.
    sizes = [len(api.records[s - 1].payload) for s in chunked]
    assert max(sizes) < 2 * CHUNK_BYTES and sum(sizes) > 3 * max(sizes)


def test_long_poll_returns_empty_after_its_timeout(api: Api) -> None:
    token = api.http.subscribe(task="orders", start="latest")
    began = time.monotonic()
    page = api.http.fetch(token, timeout_ms=300)
    assert time.monotonic() - began >= 0.3
    assert page["rows"] == [] and page["more"] is False
    assert page["next"] == {"seq": len(api.records) + 1, "row": 0}


def _append(log: ChangeLog, rec: Record) -> int:
    return log.append(Record(rec.position, rec.payload, rec.ts_us, rec.gtid, rec.tables))


@pytest.mark.parametrize("handle", ["in-process", "read-only directory"])
def test_long_poll_wakes_up_when_a_record_is_appended(
    api: Api, handle: str, tmp_path: Path
) -> None:
    if handle == "read-only directory":  # as a server in another process would read it
        api.server.tasks["orders"] = TaskHandle(log=api.log.directory, fde=api.stored.fde)
    token = api.http.subscribe(task="orders", start="latest")
    result: dict[str, Any] = {}

    def poll() -> None:
        began = time.monotonic()
        result["page"] = api.http.fetch(token, timeout_ms=20_000)
        result["elapsed"] = time.monotonic() - began

    thread = threading.Thread(target=poll)
    thread.start()
    assert api.server.metrics.wait_in_flight(1, timeout=10)
    single = next(r for r in api.records if r.first_chunk and r.last_chunk and r.tables)
    seq = _append(api.log, single)
    thread.join(timeout=20)
    assert not thread.is_alive()
    rows = result["page"]["rows"]
    assert rows and {r["sequence"] >> 24 for r in rows} == {seq}
    assert result["elapsed"] < 10  # woken by the append, not by the 20 s timeout
    if handle == "read-only directory":
        api.server.tasks["orders"].close()


def test_formats_protobuf_and_raw_carry_the_same_changes(api: Api) -> None:
    json_rows, _cp, _n = api.http.drain(api.http.subscribe(task="orders"), max_rows=100)

    token = api.http.subscribe(task="orders", format="protobuf")
    proto_rows: list[Any] = []
    while True:
        reply = api.http.post("/v1/fetch", {"checkpoint": token, "max_rows": 100})
        assert reply.headers["Content-Type"] == "application/x-protobuf"
        msg = pb.FetchResponse.FromString(reply.body)
        token = msg.checkpoint
        if not msg.rows:
            break
        proto_rows.extend(msg.rows)
    assert len(proto_rows) == len(json_rows)
    for pr, jr in zip(proto_rows, json_rows, strict=True):
        assert (pr.database, pr.table, pr.op, pr.sequence, pr.gtid) == (
            jr["database"], jr["table"], jr["op"], jr["sequence"], jr["gtid"],
        )  # fmt: skip
        assert pr.HasField("after") == (jr["after"] is not None)
        assert pr.HasField("sql") == (jr["sql"] is not None)
        assert pr.position.offset == jr["position"]["offset"]
    insert = next(pr for pr in proto_rows if pr.table == "acct" and pr.op == "insert")
    values = {c.name: c.value for c in insert.after.columns}
    assert values["id"].int == 1 and values["owner"].text == "own1"
    assert values["bal"].decimal == "0.25"
    assert values["seen"].datetime == dt.datetime(2024, 1, 2, 3, 4, 5, 678000).isoformat()
    assert values["tag"].binary == b"\x01\x00"
    updated = next(pr for pr in proto_rows if pr.op == "update")
    assert {c.name: c.value.WhichOneof("kind") for c in updated.after.columns}["seen"] == "null"

    raw, _cp, _n = api.http.drain(api.http.subscribe(task="orders", format="raw"), max_rows=9)
    assert [r["seq"] for r in raw] == list(range(1, len(api.records) + 1))
    for doc, rec in zip(raw, api.records, strict=True):
        assert base64.b64decode(doc["payload"]["base64"]) == rec.payload
        assert doc["position"] == rec.position.to_json() and doc["gtid"] == rec.gtid
        assert (doc["flags"], doc["chunk_no"]) == (rec.flags, rec.chunk_no)

    token = api.http.subscribe(task="orders", format="raw+protobuf")
    reply = api.http.post("/v1/fetch", {"checkpoint": token, "max_rows": 5})
    msg = pb.FetchResponse.FromString(reply.body)
    assert [r.seq for r in msg.records] == [1, 2, 3, 4, 5] and msg.more
    assert [r.payload for r in msg.records] == [r.payload for r in api.records[:5]]
    assert msg.next.seq == 6 and not msg.records[0].tables  # a DDL record lists no tables
    assert [t.name for t in msg.records[3].tables] == [f"{DB}.acct", f"{DB}.pair"]


def test_raw_format_filters_records_by_their_tables(api: Api) -> None:
    token = api.http.subscribe(task="orders", format="raw", tables=[f"{DB}.nokey"])
    raw, _cp, _n = api.http.drain(token)
    kept = [r for r in api.records if not r.tables or f"{DB}.nokey" in dict(r.tables)]
    assert [r["seq"] for r in raw] == [api.records.index(r) + 1 for r in kept]
