"""Preflight against live servers: each refusal has its type and names its fix."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from headwater.binlog.client import BinlogClient, ClientOptions
from headwater.binlog.preflight import heartbeat_grant_problem
from headwater.config import HeartbeatConfig, HostConfig, SourceConfig, StartConfig
from headwater.errors import (
    PositionPurgedError,
    PrivilegeError,
    ServerIdConflictError,
    SourceConfigError,
)
from headwater.position import BinlogCoordinate, MariadbGtid, MariadbGtidPos, MysqlGtidSet
from headwater.reader.heartbeat import HeartbeatWriter
from headwater.sandbox import MariadbSandbox

_server_ids = itertools.count(7300)


def client(server: MariadbSandbox, **kw: Any) -> BinlogClient:
    kw.setdefault("server_id", next(_server_ids))
    kw.setdefault("user", "root")
    return BinlogClient(
        ClientOptions(host=server.host, port=server.port, connect_timeout=5.0, **kw)
    )


def purge_to(server: MariadbSandbox, name: str) -> None:
    """PURGE BINARY LOGS TO ``name``, retried (bounded) until it took effect: MariaDB keeps
    a file until its binlog checkpoint is written, which happens in the background."""
    deadline = time.monotonic() + 10
    while True:
        server.execute(f"PURGE BINARY LOGS TO '{name}'")
        if server.query("SHOW BINARY LOGS")[0][0] == name:
            return
        assert time.monotonic() < deadline, f"binlogs before {name} were not purged"
        time.sleep(0.05)


def test_statement_format_is_refused_naming_binlog_format_row(
    sandbox_factory: Callable[..., MariadbSandbox],
) -> None:
    server = sandbox_factory(binlog_format="STATEMENT")
    with pytest.raises(SourceConfigError, match="binlog_format is STATEMENT") as e:
        client(server).connect()
    assert "set binlog_format=ROW" in str(e.value)


def test_binary_logging_off_is_refused_naming_log_bin(
    sandbox_factory: Callable[..., MariadbSandbox],
) -> None:
    server = sandbox_factory(log_bin=False)
    with pytest.raises(SourceConfigError, match="start the server with --log-bin"):
        client(server).connect()


def test_purged_file_is_refused_naming_the_oldest_binlog(
    sandbox_factory: Callable[..., MariadbSandbox],
) -> None:
    server = sandbox_factory()
    server.execute("FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
    purge_to(server, "mysql-bin.000003")
    with pytest.raises(PositionPurgedError) as e:
        client(server, start=BinlogCoordinate("mysql-bin.000001", 4)).connect()
    message = str(e.value)
    assert "requested start mysql-bin.000001:4" in message
    assert "the oldest binlog on the server is mysql-bin.000003:4" in message
    assert "Start from a position the server still has" in message


def test_purged_gtid_is_refused_by_the_server_and_named(
    sandbox_factory: Callable[..., MariadbSandbox],
) -> None:
    server = sandbox_factory()
    server.execute(
        "CREATE DATABASE d",
        "CREATE TABLE d.t (id INT PRIMARY KEY)",
        "FLUSH BINARY LOGS",
        "INSERT INTO d.t VALUES (1)",
        "FLUSH BINARY LOGS",
    )
    purge_to(server, "mysql-bin.000003")
    (gtid_pos,) = server.query("SELECT @@gtid_binlog_pos")[0]
    with client(server, start=MariadbGtidPos([MariadbGtid(0, 1, 1)]), blocking=False) as c:
        events = c.events()
        with pytest.raises(PositionPurgedError) as e:
            list(events)
    message = str(e.value)
    assert "requested start 0-1-1" in message
    assert "error 1236" in message
    assert f"its GTID position is {gtid_pos}" in message
    assert "mysql-bin.000003:4" in message


def test_user_without_binlog_monitor_gets_the_grant_to_run(mariadb: MariadbSandbox) -> None:
    mariadb.execute(
        "CREATE OR REPLACE USER 'hw_nopriv'@'%' IDENTIFIED BY 'pw1'",
        "GRANT SELECT ON *.* TO 'hw_nopriv'@'%'",
    )
    with pytest.raises(PrivilegeError) as e:
        client(mariadb, user="hw_nopriv", password="pw1").connect()
    assert "run GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'hw_nopriv'@'%'" in str(e.value)
    assert "pw1" not in str(e.value)


def test_user_without_replication_slave_gets_the_grant_to_run(mariadb: MariadbSandbox) -> None:
    mariadb.execute(
        "CREATE OR REPLACE USER 'hw_monitor'@'%' IDENTIFIED BY 'pw2'",
        "GRANT BINLOG MONITOR ON *.* TO 'hw_monitor'@'%'",
    )
    with pytest.raises(PrivilegeError, match="REPLICATION SLAVE") as e:
        client(mariadb, user="hw_monitor", password="pw2").connect()
    assert "run GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'hw_monitor'@'%'" in str(e.value)


def test_least_privileged_replication_user_can_dump(mariadb: MariadbSandbox, db: str) -> None:
    mariadb.execute(
        "CREATE OR REPLACE USER 'hw_repl'@'%' IDENTIFIED BY 'pw3'",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'hw_repl'@'%'",
    )
    file, pos = mariadb.binlog_position()
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db)
    start = BinlogCoordinate(file, pos)
    with client(mariadb, user="hw_repl", password="pw3", start=start, blocking=False) as c:
        kinds = [e.raw.type_name for e in c.events()]
    assert kinds[:4] == ["ROTATE", "FORMAT_DESCRIPTION", "MARIADB_GTID", "QUERY"]


def test_source_own_server_id_is_a_conflict(mariadb: MariadbSandbox) -> None:
    with pytest.raises(ServerIdConflictError, match="server_id 1 is the server_id of the source"):
        client(mariadb, server_id=1).connect()


def test_mysql_gtid_set_on_mariadb_is_refused(mariadb: MariadbSandbox) -> None:
    start = MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    with pytest.raises(SourceConfigError, match=r"start from a MariaDB GTID position"):
        client(mariadb, start=start).connect()


def test_row_image_and_metadata_not_full_are_warned(
    mariadb: MariadbSandbox, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        mariadb.binlog_settings(row_image="MINIMAL", metadata="MINIMAL"),
        caplog.at_level(logging.WARNING, logger="headwater.binlog.preflight"),
        client(mariadb, blocking=False) as c,
    ):
        info = c.connect()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (info.binlog_row_image, info.binlog_row_metadata) == ("MINIMAL", "MINIMAL")
    assert len(warnings) == 2
    assert "set binlog_row_image=FULL" in warnings[0]
    assert "set binlog_row_metadata=FULL" in warnings[1]


def _heartbeat_user(mariadb: MariadbSandbox, name: str, *grants: str) -> Any:
    mariadb.execute(
        f"CREATE OR REPLACE USER '{name}'@'%' IDENTIFIED BY 'hb-pw'",
        f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{name}'@'%'",
        *(g.format(u=f"'{name}'@'%'") for g in grants),
    )
    return mariadb.connect(user=name, password="hb-pw")


def test_heartbeat_grants_missing_are_named_with_the_grant_to_run(mariadb: MariadbSandbox) -> None:
    conn = _heartbeat_user(mariadb, "hw_hb_none")
    try:
        problem = heartbeat_grant_problem(conn, "hw_hb.beat", create=True)
        assert problem == (
            "'hw_hb_none'@'%' may not write the heartbeat table hw_hb.beat (missing CREATE, "
            "INSERT, UPDATE): run GRANT CREATE, INSERT, UPDATE ON `hw_hb`.* TO 'hw_hb_none'@'%'"
        )
        assert "hb-pw" not in problem
    finally:
        conn.close()
    conn = _heartbeat_user(mariadb, "hw_hb_ins", "GRANT INSERT ON `hw\\_hb`.* TO {u}")
    try:
        problem = heartbeat_grant_problem(conn, "hw_hb.beat", create=False)
        assert problem is not None and "(missing UPDATE)" in problem
    finally:
        conn.close()


def test_heartbeat_grants_from_the_documented_grant_pass(mariadb: MariadbSandbox) -> None:
    conn = _heartbeat_user(mariadb, "hw_hb_all", "GRANT CREATE, INSERT, UPDATE ON `hw_hb`.* TO {u}")
    try:
        assert heartbeat_grant_problem(conn, "hw_hb.beat", create=True) is None
    finally:
        conn.close()
    conn = _heartbeat_user(mariadb, "hw_hb_tbl", "GRANT INSERT, UPDATE ON *.* TO {u}")
    try:
        assert heartbeat_grant_problem(conn, "hw_hb.beat", create=False) is None
    finally:
        conn.close()


def test_heartbeat_without_grants_warns_once_not_every_interval(
    mariadb: MariadbSandbox, caplog: pytest.LogCaptureFixture
) -> None:
    _heartbeat_user(mariadb, "hw_hb_w").close()
    source = SourceConfig(
        name="hb",
        hosts=(HostConfig(mariadb.host, mariadb.port),),
        user="hw_hb_w",
        password="hb-pw",
        server_id=7399,
        start=StartConfig("latest"),
    )
    caplog.set_level(logging.WARNING, "headwater.reader.heartbeat")
    writer = HeartbeatWriter(source, HeartbeatConfig("hw_hb.beat", interval=0.02))
    writer.start()
    try:
        deadline = time.monotonic() + 10
        while writer.errors < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        writer.stop()
    assert writer.errors >= 10 and writer.written == 0
    lines = [r.getMessage() for r in caplog.records]
    assert [m for m in lines if "may not write the heartbeat table" in m] == [
        "hb: 'hw_hb_w'@'%' may not write the heartbeat table hw_hb.beat (missing CREATE, INSERT,"
        " UPDATE): run GRANT CREATE, INSERT, UPDATE ON `hw_hb`.* TO 'hw_hb_w'@'%'"
    ]
    assert len([m for m in lines if "heartbeat write failed" in m]) == 1
    assert all("hb-pw" not in m for m in lines)
