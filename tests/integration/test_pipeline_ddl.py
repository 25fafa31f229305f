"""End to end with schema changes: live MariaDB source -> reader -> pipeline -> MariaDB and
PostgreSQL, under ``ddl: evolve`` and ``ddl: lenient`` (issue #13).

A seeded random DML workload runs on four tables of the source database; in the middle and
at the end come column changes (ADD, DROP, MODIFY, RENAME), RENAME TABLE, TRUNCATE, DROP
TABLE then CREATE TABLE with another shape, a new table, DDL on a database outside the
pipeline, ``DROP DATABASE`` of a database the targets hold but the pipeline does not take,
and ``CREATE USER ... IDENTIFIED BY`` with a known password. One pipeline run carries four
sinks: MariaDB and PostgreSQL under ``evolve`` (afterwards ``headwater verify`` exits 0 for
every table on both) and under ``lenient`` (the rows equal the source's on the columns
they share). The unrelated target database is untouched, no account is created, and the
password is in no file of the reader's directory, the pipeline's checkpoint or Spark's
local directories (zstd frames decompressed too), in no log record of the reader, in
nothing the pipeline process printed (its Python logging at debug level, Spark's log4j
output and its Python workers' stderr), and in no response of the reader's HTTP API:
every record fetched as json, raw, protobuf and raw+protobuf, with and without a tables
filter (raw payloads and base64 fields decoded), ``/v1/info``, ``/v1/decoding`` (the
schema history it carries decoded), ``/metrics``, ``/console`` and ``/healthz``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import zstandard

from headwater.cli.main import main
from headwater.config import FilterConfig
from headwater.reader.serving import LiveTaskHandle
from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions, pb
from headwater.server.app import HeadwaterServer
from tests.integration.server_support import Http
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_caught_up
from tests.integration.test_reader_secrets import _found_in_files

pytestmark = pytest.mark.integration

PASSWORD = "Known-PW-K-4412-zq"
ACCOUNT = "hw_evil_k"
TOKEN = "token-of-the-ddl-e2e-test"


class Tables:
    """The source tables as they are now (columns and a value maker per column), so the
    random DML follows the schema changes."""

    def __init__(self, server: MariadbSandbox, db: str, seed: int) -> None:
        self.server, self.db, self.rng = server, db, random.Random(seed)
        self.columns: dict[str, dict[str, str]] = {}
        self.keys: dict[str, list[int]] = {}
        self.next_id = 0

    def ddl(self, *statements: str) -> None:
        self.server.execute(*statements, database=self.db)

    def create(self, table: str, columns: dict[str, str]) -> None:
        """``columns``: name -> kind (``int``, ``text``, ``dec``, ``date``, ``big``)."""
        types = {"int": "INT", "text": "VARCHAR(20)", "dec": "DECIMAL(8,2)", "date": "DATE",
                 "big": "BIGINT"}  # fmt: skip
        cols = ", ".join(f"{c} {types[k]}" for c, k in columns.items())
        self.ddl(f"CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, {cols})")
        self.columns[table] = dict(columns)
        self.keys[table] = []

    def _value(self, kind: str) -> str:
        r = self.rng
        if r.random() < 0.15:
            return "NULL"
        return {
            "int": lambda: str(r.randint(-1000, 1000)),
            "big": lambda: str(r.randint(-(2**40), 2**40)),
            "text": lambda: f"'v{r.randint(0, 10**6)}'",
            "dec": lambda: f"{r.randint(-99999, 99999) / 100:.2f}",
            "date": lambda: f"'20{r.randint(10, 30)}-0{r.randint(1, 9)}-1{r.randint(0, 9)}'",
        }[kind]()

    def _statement(self) -> str:
        r = self.rng
        table = r.choice(sorted(self.columns))
        cols, keys = self.columns[table], self.keys[table]
        kind = r.random()
        if kind < 0.5 or len(keys) < 3:
            self.next_id += 1
            keys.append(self.next_id)
            names = ", ".join(["id", *cols])
            values = ", ".join([str(self.next_id), *(self._value(k) for k in cols.values())])
            return f"INSERT INTO {table} ({names}) VALUES ({values})"
        key = r.choice(keys)
        if kind < 0.85 and cols:
            column = r.choice(sorted(cols))
            return f"UPDATE {table} SET {column} = {self._value(cols[column])} WHERE id = {key}"
        keys.remove(key)
        return f"DELETE FROM {table} WHERE id = {key}"

    def run(self, transactions: int) -> None:
        conn = self.server.connect(database=self.db)
        try:
            with conn.cursor() as cur:
                for _ in range(transactions):
                    cur.execute("BEGIN")
                    for _ in range(self.rng.randint(1, 3)):
                        cur.execute(self._statement())
                    cur.execute("COMMIT")
        finally:
            conn.close()


def _source_rows(server: MariadbSandbox, db: str, table: str, cols: list[str]) -> set[tuple]:
    names = ", ".join(f"CAST(`{c}` AS CHAR)" for c in cols)
    return {tuple(row) for row in server.query(f"SELECT {names} FROM `{db}`.`{table}`")}


def _pg_rows(pg: dict[str, Any], schema: str, table: str, cols: list[str]) -> set[tuple]:
    names = ", ".join(f'"{c}"::text' for c in cols)
    with psycopg.connect(**pg) as conn:
        return {tuple(r) for r in conn.execute(f'SELECT {names} FROM "{schema}"."{table}"')}


def _pg_columns(pg: dict[str, Any], schema: str, table: str) -> list[str]:
    with psycopg.connect(**pg) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
            " AND table_name = %s",
            (schema, table),
        ).fetchall()
    return [str(r[0]) for r in rows]


def _my_columns(server: MariadbSandbox, db: str, table: str) -> list[str]:
    rows = server.query(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s"
        " AND TABLE_NAME = %s",
        (db, table),
    )
    return [r[0] if isinstance(r[0], str) else r[0].decode() for r in rows]


def _created_databases(server: MariadbSandbox) -> int:
    return int(server.query("SHOW GLOBAL STATUS LIKE 'Com_create_db'")[0][1])


def _holds(data: bytes, needle: bytes) -> bool:
    """Whether ``data`` holds ``needle``: as is, in a zstd frame inside it, or, for a JSON
    document, in any string of it read as base64 (raw payloads, the schema history)."""
    if needle in data:
        return True
    start = data.find(b"\x28\xb5\x2f\xfd")
    while start >= 0:
        with contextlib.suppress(zstandard.ZstdError):  # bytes that only look like one
            if needle in zstandard.ZstdDecompressor().decompressobj().decompress(data[start:]):
                return True
        start = data.find(b"\x28\xb5\x2f\xfd", start + 1)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return any(_holds(blob, needle) for blob in _base64_strings(doc))


def _base64_strings(doc: Any) -> Iterator[bytes]:
    if isinstance(doc, dict):
        for value in doc.values():
            yield from _base64_strings(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _base64_strings(value)
    elif isinstance(doc, str) and len(doc) >= 16:
        with contextlib.suppress(binascii.Error, ValueError):
            yield base64.b64decode(doc, validate=True)


def _api_responses(http: Http, db: str) -> dict[str, bytes]:
    """Every record of the task through the API, in each format, with and without a
    tables filter (DDL on), and the other endpoints: name -> response body."""
    bodies: dict[str, bytes] = {}
    for fmt in ("json", "raw", "protobuf", "raw+protobuf"):
        for tables in (None, [f"{db}.*"], [f"{db}.d"]):
            checkpoint = http.subscribe(task="src", format=fmt, tables=tables, ddl=True)
            for page in range(1000):
                reply = http.post(
                    "/v1/fetch", {"checkpoint": checkpoint, "max_rows": 200, "timeout_ms": 0}
                )
                assert reply.status == 200, reply.body
                bodies[f"fetch {fmt} {tables} #{page}"] = reply.body
                if fmt.endswith("protobuf"):
                    doc = pb.FetchResponse()
                    doc.ParseFromString(reply.body)
                    items, more, checkpoint = (
                        len(doc.rows) + len(doc.records),
                        doc.more,
                        doc.checkpoint,
                    )
                else:
                    found = reply.json()
                    items = len(found.get("rows", found.get("records")))
                    more, checkpoint = found["more"], found["checkpoint"]
                if not items and not more:
                    break
    bodies["info"] = http.get("/v1/info").body
    bodies["metrics"] = http.get("/metrics").body
    bodies["decoding"] = http.post("/v1/decoding", {"task": "src"}).body
    bodies["console"] = http.get("/console").body
    bodies["healthz"] = http.get("/healthz").body
    return bodies


def _config(
    path: Path, task_dir: Path, db: str, target: MariadbSandbox, pg: dict[str, Any]
) -> Path:
    # Two sinks of one pipeline on one server keep their checkpoints apart.
    def mysql(dst: str, mode: str) -> str:
        return (
            f"  - type: mysql\n    host: {target.host}\n    port: {target.port}\n"
            f"    checkpoint_database: hw_{mode}\n"
            f"    user: root\n    create_tables: true\n    shards: 2\n    ddl: {mode}\n"
            f"    database_map: {{{db}: {dst}}}\n"
        )

    def postgres(dst: str, mode: str) -> str:
        return (
            f"  - type: postgres\n    host: {pg['host']}\n    port: {pg.get('port', 5432)}\n"
            f"    checkpoint_database: hw_{mode}\n"
            f"    user: {pg['user']}\n    database: {pg['dbname']}\n"
            f"    create_tables: true\n    shards: 2\n    ddl: {mode}\n"
            f"    database_map: {{{db}: {dst}}}\n"
        )

    path.write_text(
        f"name: ddl_e2e\nsource:\n  path: {task_dir}\n  tables: ['{db}.*']\n"
        f"checkpoint: {path.parent / 'ck'}\nprogress: 1\n"
        f"spark: {{master: 'local[2]', conf: {{spark.local.dir: '{path.parent / 'spark'}'}}}}\n"
        "sinks:\n"
        + mysql(f"{db}_ev", "evolve")
        + postgres(f"{db}_ev", "evolve")
        + mysql(f"{db}_le", "lenient")
        + postgres(f"{db}_le", "lenient")
        + mysql(f"{db}_ig", "ignore")
    )
    return path


@pytest.fixture
def capture(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[tuple[Running, Path]]:
    """A reader of ``db`` and of the database outside the pipeline (``<db>_o``)."""
    task_dir = tmp_path / "task"
    config = source_config(
        mariadb,
        f"ddl_{abs(hash(db)) % 10**6}",
        start=start_at(mariadb),
        filters=FilterConfig(include=(f"{db}\\..*", f"{db}_o\\..*")),
    )
    running = Running(config, task_dir)
    try:
        yield running, task_dir
    finally:
        running.stop()
        mariadb.execute(f"DROP DATABASE IF EXISTS `{db}_o`", f"DROP USER IF EXISTS '{ACCOUNT}'@'%'")


def test_schema_changes_reach_mariadb_and_postgres_in_scope_only(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    postgres: dict[str, Any],
    db: str,
    capture: tuple[Running, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="headwater")
    running, task_dir = capture
    other = f"{db}_o"
    # The targets hold a database of the same name that the pipeline does not take.
    mariadb_target.execute(
        f"CREATE DATABASE IF NOT EXISTS `{other}`",
        f"CREATE TABLE IF NOT EXISTS `{other}`.keep (id INT PRIMARY KEY)",
        f"REPLACE INTO `{other}`.keep VALUES (7)",
    )
    with psycopg.connect(**postgres, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{other}"')
        conn.execute(f'CREATE TABLE "{other}".keep (id int PRIMARY KEY)')
        conn.execute(f'INSERT INTO "{other}".keep VALUES (7)')

    # A stream from before the database existed: its CREATE DATABASE must pass.
    mariadb.execute(f"DROP DATABASE `{db}`", f"CREATE DATABASE `{db}`")
    t = Tables(mariadb, db, seed=13)
    t.create("a", {"c1": "int", "c2": "text", "c3": "dec"})
    t.create("b", {"v": "text"})
    t.create("c", {"x": "int", "y": "text"})
    t.run(80)
    # The middle: every kind of change, then more DML on the new shapes.
    t.ddl("ALTER TABLE a ADD COLUMN c4 INT NULL")
    t.columns["a"]["c4"] = "int"
    t.run(10)
    t.ddl("ALTER TABLE a DROP COLUMN c3")
    del t.columns["a"]["c3"]
    t.ddl("ALTER TABLE a MODIFY c2 VARCHAR(40)")
    t.ddl("ALTER TABLE a RENAME COLUMN c1 TO c1r")
    t.columns["a"] = {("c1r" if k == "c1" else k): v for k, v in t.columns["a"].items()}
    t.run(10)
    t.ddl("RENAME TABLE a TO a2")
    t.columns["a2"], t.keys["a2"] = t.columns.pop("a"), t.keys.pop("a")
    t.ddl("TRUNCATE TABLE b")
    t.keys["b"] = []
    t.ddl("DROP TABLE c")
    del t.columns["c"], t.keys["c"]
    t.create("c", {"z": "date", "w": "big"})
    t.create("d", {"q": "text"})
    mariadb.execute(
        f"CREATE DATABASE `{other}`",
        f"CREATE TABLE `{other}`.z (id INT PRIMARY KEY)",
        f"INSERT INTO `{other}`.z VALUES (1)",
        f"DROP DATABASE IF EXISTS `{other}`",
        f"CREATE USER '{ACCOUNT}'@'%' IDENTIFIED BY '{PASSWORD}'",
    )
    t.run(80)
    # The end: more column changes, with no DML after some of them.
    t.ddl("ALTER TABLE d ADD COLUMN r BIGINT NULL")
    t.columns["d"]["r"] = "big"
    t.run(10)
    t.ddl("ALTER TABLE a2 DROP COLUMN c4", "ALTER TABLE c MODIFY w DECIMAL(20,0)")
    del t.columns["a2"]["c4"]
    t.run(10)
    wait_caught_up(running.task, mariadb)

    config = _config(tmp_path / "pipeline.yaml", task_dir, db, mariadb_target, postgres)
    created_before = _created_databases(mariadb_target)
    # The pipeline runs as `headwater pipeline run` would, its output kept for the grep
    # below: Python logging at debug, Spark's log4j (local mode: this process's stderr),
    # and its Python workers' stderr (inherited from the JVM).
    pipeline = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "pipeline", "run", "--config",
         str(config), "--available-now", "--log-level", "debug"],
        capture_output=True, timeout=280, check=False,
    )  # fmt: skip
    assert pipeline.returncode == 0, pipeline.stderr.decode(errors="replace")[-4000:]
    assert b"schema change at sequence" in pipeline.stderr  # the debug log is in there
    # Databases are created when missing, not before each batch: the three checkpoint
    # databases, the three targets, at most the DDL's own once more.
    assert _created_databases(mariadb_target) - created_before <= 8

    tables = sorted(t.columns)
    assert tables == ["a2", "b", "c", "d"]
    # evolve: verify equal, table by table, on both targets.
    pg_url = f"postgresql://{postgres['user']}@{postgres['host']}:{postgres.get('port', 5432)}"
    for target in (mariadb_target.url, f"{pg_url}/{postgres['dbname']}"):
        for table in tables:
            status = main(
                ["verify", "--source", f"{mariadb.url}/{db}", "--target", target,
                 "--tables", f"{db}.{table}", "--map", f"{db}={db}_ev"]
            )  # fmt: skip
            assert status == 0, f"verify {table} against {target}"
    assert sorted(_my_columns(mariadb_target, f"{db}_ev", "a2")) == ["c1r", "c2", "id"]
    assert sorted(_pg_columns(postgres, f"{db}_ev", "c")) == ["id", "w", "z"]
    # lenient: the rows equal the source's on the columns they share; nothing dropped.
    for table in tables:
        source_cols = ["id", *t.columns[table]]
        shared = [c for c in source_cols if c in _my_columns(mariadb_target, f"{db}_le", table)]
        assert shared == source_cols, f"lenient MariaDB {table} misses columns"
        expected = _source_rows(mariadb, db, table, shared)
        assert _source_rows(mariadb_target, f"{db}_le", table, shared) == expected, table
        assert _pg_rows(postgres, f"{db}_le", table, shared) == expected, table
    assert "c3" in _my_columns(mariadb_target, f"{db}_le", "a2")  # dropped: kept, NULL
    assert "c4" in _pg_columns(postgres, f"{db}_le", "a2")
    assert mariadb_target.query(f"SELECT COUNT(*) FROM `{db}_le`.b")[0][0] == len(t.keys["b"])
    # ignore: the target keeps its shape (``d`` as created, without ``r``); rows are
    # written with the columns it has.
    assert sorted(_my_columns(mariadb_target, f"{db}_ig", "d")) == ["id", "q"]
    assert _source_rows(mariadb_target, f"{db}_ig", "d", ["id", "q"]) == _source_rows(
        mariadb, db, "d", ["id", "q"]
    )
    # Out of scope: untouched; no account; the password stored nowhere.
    assert mariadb_target.query(f"SELECT id FROM `{other}`.keep") == [(7,)]
    with psycopg.connect(**postgres) as conn:
        assert conn.execute(f'SELECT id FROM "{other}".keep').fetchall() == [(7,)]
        roles = conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (ACCOUNT,))
        assert roles.fetchone() == (0,)
    assert mariadb_target.query("SELECT COUNT(*) FROM mysql.user WHERE user = %s", (ACCOUNT,)) == [
        (0,)
    ]
    secret = PASSWORD.encode()
    # The source logged the password in clear (the premise of the checks) ...
    binlogs = [mariadb.binlog_path(f) for (f, *_rest) in mariadb.query("SHOW BINARY LOGS")]
    assert any(secret in p.read_bytes() for p in binlogs)
    # ... no file of the reader, of the pipeline's checkpoint or of Spark's local
    # directories holds it, nothing logged or printed does, no API response does.
    assert (tmp_path / "spark").is_dir()
    for root in (task_dir, tmp_path / "ck", tmp_path / "spark"):
        assert _found_in_files(root, secret) == [], root
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)
    assert not _holds(pipeline.stdout, secret) and not _holds(pipeline.stderr, secret)
    server = HeadwaterServer(
        {"src": LiveTaskHandle.of(running.task)}, ServerOptions(token=TOKEN, fetch_workers=0)
    ).start()
    try:
        bodies = _api_responses(Http(server.url, token=TOKEN), db)
    finally:
        server.close()
    # The fetches saw the statements (decoded and raw), so a password among them would show.
    assert any(b"ADD COLUMN c4" in b for n, b in bodies.items() if n.startswith("fetch json "))
    assert any(b"ADD COLUMN c4" in b for n, b in bodies.items() if n.startswith("fetch protob"))
    leaks = [name for name, body in bodies.items() if _holds(body, secret)]
    assert leaks == []
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)
    mariadb_target.execute(
        f"DROP DATABASE IF EXISTS `{other}`",
        f"DROP DATABASE IF EXISTS `{db}_ev`",
        f"DROP DATABASE IF EXISTS `{db}_le`",
        f"DROP DATABASE IF EXISTS `{db}_ig`",
    )
