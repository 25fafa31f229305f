"""End to end: ``headwater reader run`` as a subprocess on a live MariaDB, read over HTTP.

The source logs with ``binlog_row_metadata=MINIMAL``: its TABLE_MAPs carry no column
names, signedness or charsets, so the rows fetched over HTTP have real names, unsigned
values and latin1 text only because the reader process serves its schema history. The
oracle is the server's own binlog files, grouped and decoded independently
(``test_reader_capture``) with the history the reader persisted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from headwater.binlog.dump import render_json
from headwater.changes import decode_record
from headwater.position import BinlogCoordinate
from headwater.sandbox import MariadbSandbox
from headwater.schema.history import SchemaHistory
from headwater.server.encoding import row_json
from tests.integration.server_support import Http
from tests.integration.test_reader_capture import oracle_transactions, wait_for

TOKEN = "s3cret-token-for-the-test"
U64 = 2**64 - 1
U32 = 2**32 - 1


def _config(tmp: Path, server: MariadbSandbox, start: BinlogCoordinate) -> Path:
    (tmp / "token").write_text(TOKEN + "\n")
    path = tmp / "reader.yaml"
    path.write_text(
        f"""data_dir: data
server:
  listen: "127.0.0.1:0"
  token_file: token
sources:
  - name: shop
    host: {server.host}
    port: {server.port}
    user: root
    server_id: 7311
    start: {{file: {start.file}, offset: {start.offset}}}
    filters: {{include: ['shop\\..*']}}
    heartbeat_period: 0.5
    state_interval: 0.1
"""
    )
    return path


def _workload(server: MariadbSandbox) -> None:
    conn = server.connect("shop")
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO item VALUES ({U32}, {U64}, 'café', 'first')")
        cur.execute("INSERT INTO item VALUES (1, 2, 'b', 'x'), (2, 3, 'c', 'y')")
        cur.execute("BEGIN")
        cur.execute("UPDATE item SET big = big - 1, label = 'naïve' WHERE id = 1")
        cur.execute("DELETE FROM item WHERE id = 2")
        cur.execute("COMMIT")
        cur.execute("ALTER TABLE item ADD COLUMN qty SMALLINT UNSIGNED NOT NULL DEFAULT 7")
        cur.execute("INSERT INTO item VALUES (3, 4, 'd', 'z', 65535)")
        cur.execute("UPDATE item SET qty = qty - 1 WHERE id = 3")
    conn.close()


def test_reader_process_serves_its_changes_over_http_and_stops_on_sigterm(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=31, binlog_row_metadata="MINIMAL")
    server.execute(
        "CREATE DATABASE shop",
        "CREATE TABLE shop.item (id INT UNSIGNED PRIMARY KEY, big BIGINT UNSIGNED,"
        " label VARCHAR(20) CHARACTER SET latin1, note TEXT)",
    )
    start = BinlogCoordinate(*server.binlog_position())
    config = _config(tmp_path, server, start)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli.main", "reader", "run", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        server_file = tmp_path / "data" / "server.json"
        wait_for(lambda: server_file.exists() or proc.poll() is not None, 30, "server.json")
        assert proc.poll() is None, proc.communicate()[1]
        http = Http(json.loads(server_file.read_text())["url"], token=TOKEN)
        assert http.get("/healthz", token="").status == 200
        assert http.get("/v1/info", token="wrong").status == 401

        def running() -> bool:
            return bool(
                http.get("/v1/info").json()["tasks"]["shop"]["status"]["state"] == "running"
            )

        # The schema history is bootstrapped (information_schema) before "running".
        wait_for(running, 30, "the task to run")
        _workload(server)
        target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])

        def caught_up() -> bool:
            task = http.get("/v1/info").json()["tasks"]["shop"]
            assert task["status"]["state"] != "failed", task["status"]["error"]
            return bool(task["gtid_set"] == target)

        wait_for(caught_up, 30, f"the reader to reach {target}")
        rows, _checkpoint, _fetches = http.drain(http.subscribe(task="shop"), max_rows=3)
        info = http.get("/v1/info").json()["tasks"]["shop"]
        metrics = http.get("/metrics").body.decode()
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert TOKEN not in err

    # Exactly the source's changes, decoded with the history the reader persisted.
    fde, expected = oracle_transactions(server, start)
    with SchemaHistory.open(tmp_path / "data" / "shop" / "schema.jsonl") as history:
        want = [
            orjson.loads(render_json(row_json(c)))
            for rec in expected
            for c in decode_record(rec, source="shop", fde=fde, schema=history)
            if c.database == "shop"
        ]
    strip = ("sequence", "schema_version")
    assert [{k: v for k, v in r.items() if k not in strip} for r in rows] == [
        {k: v for k, v in r.items() if k not in strip} for r in want
    ]
    # MINIMAL metadata, yet real names, unsigned values, latin1 text and the key.
    first = rows[0]
    assert first["op"] == "insert" and first["after"] == {
        "id": U32,
        "big": U64,
        "label": "café",
        "note": "first",
    }
    assert first["key"] == {"id": U32}
    update = next(r for r in rows if r["op"] == "update")
    assert update["after"]["big"] == 1 and update["after"]["label"] == "naïve"
    ddl = next(r for r in rows if r["op"] == "ddl")
    assert "ADD COLUMN qty" in ddl["sql"]
    after_ddl = [r for r in rows if r["op"] == "insert" and r["after"]["id"] == 3]
    assert after_ddl[0]["after"]["qty"] == 65535
    assert [r["op"] for r in rows].count("insert") == 4
    # Live status: positions, GTID set, counters.
    status = info["status"]
    assert info["gtid_set"] == target and status["state"] == "running"
    assert status["events_in"] > 0 and status["bytes_in"] > 0
    assert status["transactions_stored"] == 6 and status["position"]
    assert 'headwater_transactions_stored_total{task="shop"} 6' in metrics
    assert 'headwater_events_in_total{task="shop"}' in metrics
    # The resume point was saved on SIGTERM.
    state = json.loads((tmp_path / "data" / "shop" / "status.json").read_text())
    assert state["state"] == "stopped" and state["gtid_set"] == target
