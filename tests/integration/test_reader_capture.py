"""The reader captures a live MariaDB into its change log exactly (differential tests).

The oracle reads the server's binlog files independently (``iter_file_events`` over the
sandbox's files) and groups them the simple way (MARIADB_GTID ... XID/COMMIT, or a
standalone GTID + QUERY); both sides are decoded with ``decode_record`` and compared change
by change: GTID, table, operation, before and after images, DDL text. The helpers here are
shared by the other ``test_reader_*`` integration tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.binlog.constants import EventType
from headwater.binlog.framing import FormatDescription, iter_file_events
from headwater.changes import decode_record, encode_events
from headwater.config import BackoffConfig, FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.position import BinlogCoordinate, Position, binlog_file_number
from headwater.reader.task import ReaderTask
from headwater.sandbox import MariadbSandbox
from headwater.store import ChangeLog, Record

Change = tuple[Any, ...]


# --- helpers shared by the reader integration tests -------------------------------------------


def source_config(
    server: MariadbSandbox, name: str, *, start: StartConfig | None = None, **kw: Any
) -> SourceConfig:
    return SourceConfig(
        name=name,
        hosts=kw.pop("hosts", (HostConfig(server.host, server.port),)),
        user=kw.pop("user", "root"),
        server_id=kw.pop("server_id", 4000 + (abs(hash(name)) % 1000)),
        start=start or StartConfig("latest"),
        heartbeat_period=kw.pop("heartbeat_period", 0.5),
        state_interval=kw.pop("state_interval", 0.05),
        **kw,
    )


def start_at(server: MariadbSandbox) -> StartConfig:
    file, offset = server.binlog_position()
    return StartConfig("file", coordinate=BinlogCoordinate(file, offset))


class Running:
    """A ReaderTask run in a thread for a test."""

    def __init__(self, config: SourceConfig, task_dir: Path) -> None:
        self.task = ReaderTask(config, task_dir)
        self.thread = threading.Thread(target=self.task.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.task.request_stop()
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.task.close()


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_caught_up(task: ReaderTask, server: MariadbSandbox, timeout: float = 30.0) -> None:
    """Until the task has processed the server's last GTID (and has not failed)."""
    target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])

    def done() -> bool:
        assert task.state != "failed", task.error
        return task.gtid_set is not None and str(task.gtid_set) == target

    wait_for(done, timeout, f"the task to reach GTID {target} (at {task.gtid_set})")


def oracle_transactions(
    server: MariadbSandbox, start: BinlogCoordinate
) -> tuple[FormatDescription, list[Record]]:
    """The server's transactions from ``start``, grouped from its binlog files."""
    names = [str(r[0]) for r in server.query("SHOW BINARY LOGS")]
    names = names[names.index(start.file) :]
    fde: FormatDescription | None = None
    out: list[Record] = []
    for name in names:
        current: list[bytes] = []
        standalone = False
        gtid = ""
        first = 0
        for raw in iter_file_events(server.binlog_path(name)):
            tc = raw.type_code
            if tc == EventType.FORMAT_DESCRIPTION:
                fde = FormatDescription.parse(raw.data)
                continue
            if raw.offset is None or (name == start.file and raw.offset < start.offset):
                continue
            if tc == EventType.MARIADB_GTID:
                body = raw.body
                seq_no = int.from_bytes(body[:8], "little")
                domain = int.from_bytes(body[8:12], "little")
                gtid = f"{domain}-{raw.server_id}-{seq_no}"
                standalone = bool(body[12] & 1)
                current, first = [bytes(raw.data)], raw.offset
                continue
            if not current:
                continue
            current.append(bytes(raw.data))
            end = tc == EventType.XID or (
                tc == EventType.QUERY
                and (standalone or bytes(raw.body).rstrip(b"\0").upper().endswith(b"COMMIT"))
            )
            if end:
                out.append(
                    Record(
                        Position(0, binlog_file_number(name), first),
                        encode_events(current),
                        raw.timestamp * 1_000_000,
                        gtid,
                        seq=len(out) + 1,
                    )
                )
                current = []
    assert fde is not None
    return fde, out


def changes_of(records: list[Record], fde: FormatDescription, db: str | None) -> list[Change]:
    """(gtid, db, table, op, before, after, sql) of every change, in order."""
    want = None if db is None else (lambda d, _t: d == db)
    out: list[Change] = []
    for rec in records:
        for c in decode_record(rec, source="t", fde=fde, want=want):
            if c.op == "ddl" and db is not None and db not in (c.sql or "") and c.database != db:
                continue
            out.append((c.gtid, c.database, c.table, c.op, c.before, c.after, c.sql))
    return out


def stored_records(directory: Path) -> list[Record]:
    with ChangeLog.open(str(directory / "changes"), read_only=True) as log, log.reader() as r:
        return list(iter(lambda: r.next(0), None))


def assert_same_changes(
    server: MariadbSandbox, start: BinlogCoordinate, task_dir: Path, db: str
) -> list[Record]:
    fde, expected = oracle_transactions(server, start)
    got = stored_records(task_dir)
    want = changes_of(expected, fde, db)
    have = changes_of(got, fde, db)
    assert want, "the oracle found no changes: the test checks nothing"
    assert have == want
    gtids = [r.gtid for r in got if r.last_chunk]
    assert len(gtids) == len(set(gtids)), "a transaction was stored twice"
    return got


def workload(server: MariadbSandbox, db: str, n: int, *, tag: str = "") -> None:
    conn = server.connect(db)
    with conn.cursor() as cur:
        for i in range(n):
            cur.execute(f"INSERT INTO t (id, v) VALUES ({i}{tag and '+' + tag}, 'v{i}')")
            if i % 3 == 0:
                cur.execute(f"UPDATE t SET v = CONCAT(v, '!') WHERE id = {i}{tag and '+' + tag}")
    conn.close()


# --- tests ------------------------------------------------------------------------------------


@pytest.fixture
def reader_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "task"


def test_rows_and_ddl_in_the_middle_are_captured_exactly(
    mariadb: MariadbSandbox, db: str, reader_dir: Path
) -> None:
    start = start_at(mariadb)
    config = source_config(
        mariadb, "capture", start=start, filters=FilterConfig(include=(rf"{db}\..*",))
    )
    run = Running(config, reader_dir)
    try:
        mariadb.execute(
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))",
            "CREATE TABLE other (n INT)",
            database=db,
        )
        conn = mariadb.connect(db)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            cur.execute("BEGIN")
            cur.execute("UPDATE t SET v = 'bb' WHERE id = 2")
            cur.execute("INSERT INTO other VALUES (7)")
            cur.execute("DELETE FROM t WHERE id = 3")
            cur.execute("COMMIT")
            cur.execute("ALTER TABLE t ADD COLUMN w INT DEFAULT 5")
            cur.execute("INSERT INTO t VALUES (4, 'd', 6)")
            cur.execute("UPDATE t SET w = w + 1")
            cur.execute("ALTER TABLE t MODIFY COLUMN v VARCHAR(80)")
            cur.execute("ALTER TABLE t DROP COLUMN w")
            cur.execute("DELETE FROM t WHERE id = 1")
            cur.execute("RENAME TABLE t TO t2")
            cur.execute("INSERT INTO t2 VALUES (5, 'e')")
            cur.execute("UPDATE t2 SET v = 'E' WHERE id = 5")
        conn.close()
        wait_caught_up(run.task, mariadb)
    finally:
        run.stop()
    got = assert_same_changes(mariadb, start.coordinate, reader_dir, db)  # type: ignore[arg-type]
    ops = [(c.op, c.table) for r in got for c in decode_record(r, source="t", fde=None)]
    assert ("update", "t") in ops and ("insert", "t2") in ops and ("delete", "t") in ops
    # Records carry their tables with row counts, GTIDs and commit times.
    multi = next(r for r in got if dict(r.tables).get(f"{db}.other"))
    assert dict(multi.tables) == {f"{db}.t": 2, f"{db}.other": 1}
    assert all(r.gtid.startswith("0-1-") and r.ts_us > 1_600_000_000_000_000 for r in got)
    # Schema versions grow with the DDL (bootstrap is version 1).
    versions = [r.schema_version for r in got]
    assert versions == sorted(versions) and versions[-1] > versions[0]
    assert run.task.transactions_stored == len(got)


def test_excluded_tables_are_not_stored_and_the_position_still_advances(
    mariadb: MariadbSandbox, db: str, reader_dir: Path
) -> None:
    start = start_at(mariadb)
    mariadb.execute(
        "CREATE TABLE keep_me (id INT PRIMARY KEY)",
        "CREATE TABLE tmp_skip (id INT PRIMARY KEY)",
        database=db,
    )
    config = source_config(
        mariadb,
        "filtered",
        start=start,
        filters=FilterConfig(
            include=(rf"{db}\..*",), exclude=(r".*\.tmp_.*",), events=("insert", "delete")
        ),
    )
    run = Running(config, reader_dir)
    try:
        mariadb.execute(
            "INSERT INTO keep_me VALUES (1), (2)",
            "INSERT INTO tmp_skip VALUES (1)",
            "UPDATE keep_me SET id = 3 WHERE id = 2",
            "DELETE FROM keep_me WHERE id = 1",
            "INSERT INTO tmp_skip VALUES (2)",
            database=db,
        )
        wait_caught_up(run.task, mariadb)
        task = run.task
    finally:
        run.stop()
    got = stored_records(reader_dir)
    changes = [(c.table, c.op) for r in got for c in decode_record(r, source="t", fde=None)]
    assert changes == [("keep_me", "insert"), ("keep_me", "insert"), ("keep_me", "delete")]
    assert task.transactions_filtered >= 4  # 2 CREATE TABLEs (ddl dropped), tmp_skip x2, update
    last_gtid = str(mariadb.query("SELECT @@gtid_binlog_pos")[0][0])
    assert str(task.gtid_set) == last_gtid


def test_restart_of_the_server_mid_stream_loses_and_duplicates_nothing(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=11)
    server.execute("CREATE DATABASE r", "CREATE TABLE r.t (id INT PRIMARY KEY, v VARCHAR(40))")
    start = start_at(server)
    config = source_config(
        server,
        "restart",
        start=start,
        reconnect=BackoffConfig(initial=0.05, max=0.5),
    )
    run = Running(config, tmp_path / "task")
    try:
        workload(server, "r", 50)
        wait_caught_up(run.task, server)
        server.restart()
        workload(server, "r", 50, tag="1000")
        wait_caught_up(run.task, server, timeout=60)
        assert run.task.reconnects >= 1
    finally:
        run.stop()
    got = assert_same_changes(server, start.coordinate, tmp_path / "task", "r")  # type: ignore[arg-type]
    assert len(got) == 100 + 17 * 2


def test_heartbeat_rows_measure_end_to_end_lag(
    mariadb: MariadbSandbox, db: str, reader_dir: Path
) -> None:
    from headwater.config import HeartbeatConfig

    config = source_config(
        mariadb,
        "heartbeat",
        start=start_at(mariadb),
        heartbeat=HeartbeatConfig(f"{db}.hw_heartbeat", interval=0.05),
    )
    run = Running(config, reader_dir)
    try:
        wait_for(lambda: run.task.lag_s is not None, 30, "a heartbeat to arrive")
        wait_for(lambda: run.task.heartbeat is not None and run.task.heartbeat.written >= 3)
        status = run.task.status()
    finally:
        run.stop()
    assert 0 <= status["lag_s"] < 5 and status["heartbeats_written"] >= 3
    rows = mariadb.query(f"SELECT id FROM `{db}`.hw_heartbeat")
    assert [tuple(r) for r in rows] == [(config.server_id,)]
    # The heartbeat rows are changes like any other: stored in the change log.
    tables = {name for r in stored_records(reader_dir) for name, _ in r.tables}
    assert f"{db}.hw_heartbeat" in tables
