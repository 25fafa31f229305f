"""Secrets never stored, DDL in scope only: ``headwater reader run`` on a live MariaDB.

The source runs account, privilege and server statements that carry a known password,
DDL of the reader's database and of another one, and rows. Afterwards the password occurs
in no file under the reader's data directory (zstd frames decompressed too), in nothing
the reader logged, and in no API response (JSON rows, raw records with their payloads
decoded); the redacted statements still decode; a consumer that filters tables sees the
DDL of its tables only, never a statement that is not about data.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import zstandard

from headwater.changes import iter_payload_events
from headwater.sandbox import MariadbSandbox
from tests.integration.server_support import Http
from tests.integration.test_reader_capture import wait_for

TOKEN = "token-for-the-secrets-test"
SECRET = "Repl-S3cret-PW-7731"
STATEMENTS = (
    f"CREATE USER 'repl'@'%' IDENTIFIED BY '{SECRET}'",
    f"ALTER USER 'repl'@'%' IDENTIFIED BY '{SECRET}-2'",
    f"SET PASSWORD FOR 'repl'@'%' = PASSWORD('{SECRET}-3')",
    f"GRANT SELECT ON shop.* TO 'other'@'%' IDENTIFIED BY '{SECRET}-4'",
    "CREATE SERVER remote FOREIGN DATA WRAPPER mysql OPTIONS "
    f"(HOST '127.0.0.1', DATABASE 'shop', USER 'repl', PASSWORD '{SECRET}-5', PORT 3306)",
    f"ALTER SERVER remote OPTIONS (PASSWORD '{SECRET}-6')",
)


def _config(tmp: Path, server: MariadbSandbox) -> Path:
    (tmp / "token").write_text(TOKEN + "\n")
    file, offset = server.binlog_position()
    path = tmp / "reader.yaml"
    path.write_text(
        f"""data_dir: data
server:
  listen: "127.0.0.1:0"
  token_file: token
sources:
  - name: src
    host: {server.host}
    port: {server.port}
    user: root
    server_id: 7312
    start: {{file: {file}, offset: {offset}}}
    heartbeat_period: 0.5
    state_interval: 0.1
"""
    )
    return path


def _found_in_files(root: Path, needle: bytes) -> list[str]:
    """Files under ``root`` holding ``needle``, as stored or inside any zstd frame."""
    hits = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        texts = [data]
        start = data.find(b"\x28\xb5\x2f\xfd")
        while start >= 0:
            with contextlib.suppress(zstandard.ZstdError):  # bytes that only look like one
                texts.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[start:]))
            start = data.find(b"\x28\xb5\x2f\xfd", start + 1)
        if any(needle in t for t in texts):
            hits.append(str(path))
    return hits


def _raw_statements(records: list[dict[str, Any]]) -> list[bytes]:
    out = []
    for rec in records:
        payload = base64.b64decode(rec["payload"]["base64"])
        for ev in iter_payload_events(payload):
            if ev.type_code == 2:  # QUERY
                out.append(bytes(ev.data))
    return out


def test_passwords_never_reach_the_log_and_filtered_consumers_see_their_ddl_only(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=41)
    server.execute("CREATE DATABASE shop", "CREATE TABLE shop.x (id INT PRIMARY KEY)")
    config = _config(tmp_path, server)
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
        wait_for(
            # (a reader still starting answers without its tasks: keep waiting)
            lambda: (
                http.get("/v1/info")
                .json()
                .get("tasks", {})
                .get("src", {})
                .get("status", {})
                .get("state")
                == "running"
            ),
            30,
            "the task to run",
        )
        server.execute(
            "INSERT INTO shop.x VALUES (1)",
            *STATEMENTS,
            "ALTER TABLE shop.x ADD COLUMN c INT",
            "CREATE DATABASE otherdb",
            "CREATE TABLE otherdb.t (a INT)",
            "DROP DATABASE otherdb",
            "INSERT INTO shop.x VALUES (2, 2)",
        )
        target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])

        def caught_up() -> bool:
            task = http.get("/v1/info").json()["tasks"]["src"]
            assert task["status"]["state"] != "failed", task["status"]["error"]
            return bool(task["gtid_set"] == target)

        wait_for(caught_up, 30, f"the reader to reach {target}")
        everything, _, _ = http.drain(http.subscribe(task="src"))
        filtered, _, _ = http.drain(http.subscribe(task="src", tables=["shop.x"]))
        raw_all, _, _ = http.drain(http.subscribe(task="src", format="raw"))
        raw_filtered, _, _ = http.drain(http.subscribe(task="src", format="raw", tables=["shop.x"]))
        bodies = [
            http.post("/v1/fetch", {"checkpoint": http.subscribe(task="src", format=f)}).body
            for f in ("json", "raw", "protobuf", "raw+protobuf")
        ]
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    secret = SECRET.encode()
    # The server logged the passwords in clear (the premise of the test) ...
    binlogs = [server.binlog_path(f) for (f, *_rest) in server.query("SHOW BINARY LOGS")]
    assert any(secret in p.read_bytes() for p in binlogs)
    # ... the reader stored, logged and served none of them.
    assert _found_in_files(tmp_path / "data", secret) == []
    assert secret.decode() not in err
    for body in bodies:
        assert secret not in body and base64.b64encode(secret)[:16] not in body
    statements = _raw_statements(raw_all)
    assert all(secret not in s for s in statements)
    for what in (everything, filtered):
        assert SECRET not in json.dumps(what)

    # Every account/server statement is there, redacted, and decodes (JSON rows are
    # decoded from the stored events by the server).
    sqls = [r["sql"] for r in everything if r["op"] == "ddl"]
    assert "CREATE USER 'repl'@'%' IDENTIFIED BY '<redacted>'" in sqls
    assert "ALTER USER 'repl'@'%' IDENTIFIED BY '<redacted>'" in sqls
    # MariaDB logs SET PASSWORD with the hash it computed: redacted as well
    assert "SET PASSWORD FOR 'repl'@'%'='<redacted>'" in sqls
    assert "GRANT SELECT ON shop.* TO 'other'@'%' IDENTIFIED BY '<redacted>'" in sqls
    # MariaDB 10.11 does not log CREATE/ALTER SERVER (sql/sql_servers.cc writes no binlog
    # event); where a server does, the unit tests cover its redaction
    logged_servers = sum(p.read_bytes().count(b"SERVER remote") for p in binlogs)
    assert sum("PASSWORD '<redacted>'" in s for s in sqls) == logged_servers
    # The stored records list what each DDL touches.
    tables = [tuple(t["name"] for t in r["tables"]) for r in raw_all]
    assert tables.count(("!account",)) == 3 and tables.count(("!server",)) == logged_servers
    assert ("!privilege",) in tables and ("shop.x",) in tables
    assert ("otherdb.*",) in tables and ("otherdb.t",) in tables

    # A consumer of shop.x: its rows and its DDL, nothing else, raw or decoded.
    raw_names = {t["name"] for r in raw_filtered for t in r["tables"]}
    assert raw_names == {"shop.x"}
    assert len(raw_filtered) == 3  # two inserts and the ALTER TABLE
    assert [r["sql"] for r in filtered if r["op"] == "ddl"] == [
        "ALTER TABLE shop.x ADD COLUMN c INT"
    ]
    assert [(r["op"], r["database"], r["table"]) for r in filtered if r["op"] != "ddl"] == [
        ("insert", "shop", "x"),
        ("insert", "shop", "x"),
    ]
