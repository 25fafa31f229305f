"""The replica client against a live MariaDB: what it receives is what the server logged.

Two oracles: the binlog file itself in the sandbox datadir (framed by
``framing.iter_file_events``: every event's offset and bytes must match), and
``mariadb-binlog`` (an independent reader: offsets, end_log_pos and event kinds).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headwater.binlog._packets import (
    COM_BINLOG_DUMP,
    COM_REGISTER_SLAVE,
    ClientEvent,
    binlog_dump,
    register_slave,
)
from headwater.binlog.client import BinlogClient, ClientOptions, TlsOptions, client_from_url
from headwater.binlog.constants import CHECKSUM_ALG_CRC32, CHECKSUM_ALG_OFF, EventType
from headwater.binlog.framing import iter_file_events
from headwater.errors import (
    AuthenticationError,
    ConnectionLostError,
    ServerIdConflictError,
    SourceError,
)
from headwater.position import BinlogCoordinate, MariadbGtid, MariadbGtidPos
from headwater.sandbox import MariadbSandbox

# server_ids unique within the run: a registration lives as long as its server thread.
_server_ids = itertools.count(7100)


def options(server: MariadbSandbox, **kw: Any) -> ClientOptions:
    kw.setdefault("server_id", next(_server_ids))
    kw.setdefault("connect_timeout", 5.0)
    return ClientOptions(host=server.host, port=server.port, user="root", **kw)


def dump_to_end(server: MariadbSandbox, **kw: Any) -> list[ClientEvent]:
    """Every event from ``start`` to the current end of the log (non-blocking dump)."""
    with BinlogClient(options(server, blocking=False, heartbeat_period=1.0, **kw)) as client:
        return list(client.events())


def real_events(events: list[ClientEvent], file: str) -> list[tuple[int, bytes]]:
    return [(e.offset, bytes(e.raw.data)) for e in events if e.file == file and not e.artificial]


def file_events(server: MariadbSandbox, file: str, start: int) -> list[tuple[int, bytes]]:
    assert server.binlog_path(file).exists()
    return [
        (ev.offset, bytes(ev.data))
        for ev in iter_file_events(server.binlog_path(file), start=start)
        if ev.offset is not None
    ]


_MARIADB_BINLOG_KIND = {
    "GTID": "MARIADB_GTID",
    "Query": "QUERY",
    "Annotate_rows:": "ANNOTATE_ROWS",
    "Table_map:": "TABLE_MAP",
    "Write_rows:": "WRITE_ROWS_V1",
    "Update_rows:": "UPDATE_ROWS_V1",
    "Delete_rows:": "DELETE_ROWS_V1",
    "Xid": "XID",
    "Rotate": "ROTATE",
}


def mariadb_binlog_events(path: Path, start: int) -> list[tuple[int, int, str]]:
    """(offset, end_log_pos, kind) of each event from ``start``, as mariadb-binlog lists them."""
    out = subprocess.run(
        [
            "mariadb-binlog",
            "--no-defaults",
            "--base64-output=never",
            f"--start-position={start}",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    offsets = [int(m) for m in re.findall(r"^# at (\d+)$", out, re.M)]
    ends = re.findall(r"^#\d+ +\d+:\d+:\d+ server id \d+ +end_log_pos (\d+) .*?\t(\S+)", out, re.M)
    assert len(offsets) == len(ends) > 0
    return [
        (off, int(end), _MARIADB_BINLOG_KIND.get(kind, kind))
        for off, (end, kind) in zip(offsets, ends, strict=True)
    ]


def write_some_rows(server: MariadbSandbox, db: str) -> None:
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200), b BLOB)",
        "INSERT INTO t VALUES (1, 'one', REPEAT('x', 5000)), (2, 'two', NULL)",
        "UPDATE t SET v = 'uno' WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
        database=db,
    )


def test_dump_from_file_offset_receives_exactly_the_logged_events(
    mariadb: MariadbSandbox, db: str
) -> None:
    file, start = mariadb.binlog_position()
    write_some_rows(mariadb, db)
    mariadb.execute("FLUSH BINARY LOGS")  # closes the file: it is complete on disk

    events = dump_to_end(mariadb, start=BinlogCoordinate(file, start))

    assert events[0].raw.type_code == EventType.ROTATE and events[0].artificial
    assert events[0].coordinate == BinlogCoordinate(file, start)
    got = real_events(events, file)
    assert got == file_events(mariadb, file, start)  # offsets and bytes, event by event
    listed = mariadb_binlog_events(mariadb.binlog_path(file), start)
    in_file = [e for e in events if e.file == file and not e.artificial]
    assert [(e.offset, e.raw.log_pos, e.raw.type_name) for e in in_file] == listed
    # each event's next coordinate is where the following one starts
    for before, after in itertools.pairwise(in_file):
        assert before.next_coordinate == after.coordinate
    assert in_file[-1].raw.type_code == EventType.ROTATE
    assert in_file[-1].next_coordinate.offset == 4
    assert in_file[-1].next_file != file


def test_dump_from_the_start_of_a_file_gets_its_format_description(
    mariadb: MariadbSandbox, db: str
) -> None:
    write_some_rows(mariadb, db)
    file, _ = mariadb.binlog_position()
    mariadb.execute("FLUSH BINARY LOGS")

    with BinlogClient(options(mariadb, start=BinlogCoordinate(file, 4), blocking=False)) as client:
        events = list(client.events())
        fde = client.format_description
        info = client.info

    assert [e.raw.type_name for e in events[:2]] == ["ROTATE", "FORMAT_DESCRIPTION"]
    assert events[1].coordinate == BinlogCoordinate(file, 4) and not events[1].artificial
    assert fde is not None and fde.checksum_alg == CHECKSUM_ALG_CRC32
    assert fde.server_version.startswith("10.11")
    assert real_events(events, file) == file_events(mariadb, file, 4)
    assert (info.flavor, info.server_id, info.gtid_domain_id, info.server_uuid) == (
        "mariadb",
        1,
        0,
        None,
    )
    assert info.identity == "mariadb:1:0"


def test_dump_from_a_mariadb_gtid_position_starts_after_that_gtid(
    mariadb: MariadbSandbox, db: str
) -> None:
    conn = mariadb.connect(db)
    gtids = []
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        for i in range(3):
            cur.execute("INSERT INTO t VALUES (%s)", (i,))
            cur.execute("SELECT @@last_gtid")
            gtids.append(MariadbGtid.parse(cur.fetchone()[0]))
    conn.close()

    events = dump_to_end(mariadb, start=MariadbGtidPos([gtids[0]]))

    seen = []
    for e in events:
        if e.raw.type_code == EventType.MARIADB_GTID:
            seq_no, domain = struct.unpack_from("<QI", e.raw.data, 19)
            seen.append(MariadbGtid(domain, e.raw.server_id, seq_no))
    assert seen[:2] == gtids[1:]
    assert gtids[0] not in seen
    # the first transaction sent starts where the server logged it
    first = next(e for e in events if e.raw.type_code == EventType.MARIADB_GTID)
    on_disk = dict(file_events(mariadb, first.file, 4))
    assert on_disk[first.offset] == bytes(first.raw.data)


def test_dump_across_crc32_and_none_checksum_files(mariadb: MariadbSandbox, db: str) -> None:
    file, start = mariadb.binlog_position()
    with mariadb.binlog_settings(checksum="NONE"):  # rotates to a file without checksums
        none_file, _ = mariadb.binlog_position()
        write_some_rows(mariadb, db)
    crc_file, _ = mariadb.binlog_position()  # restoring CRC32 rotated again
    mariadb.execute("INSERT INTO t VALUES (3, 'three', NULL)", database=db)
    mariadb.execute("FLUSH BINARY LOGS")
    last_file, _ = mariadb.binlog_position()

    with BinlogClient(options(mariadb, start=BinlogCoordinate(file, start), blocking=False)) as c:
        events = list(c.events())

    algs = [
        (e.file, e.raw.data[-5])
        for e in events
        if e.raw.type_code == EventType.FORMAT_DESCRIPTION and not e.artificial
    ]
    assert algs == [
        (none_file, CHECKSUM_ALG_OFF),
        (crc_file, CHECKSUM_ALG_CRC32),
        (last_file, CHECKSUM_ALG_CRC32),
    ]
    assert len({file, none_file, crc_file}) == 3
    assert real_events(events, file) == file_events(mariadb, file, start)
    assert real_events(events, none_file) == file_events(mariadb, none_file, 4)
    assert real_events(events, crc_file) == file_events(mariadb, crc_file, 4)


def test_blocking_dump_sees_new_events_and_heartbeats_while_idle(
    mariadb: MariadbSandbox, db: str
) -> None:
    with BinlogClient(options(mariadb, heartbeat_period=0.2)) as client:
        client.connect()  # dump from the current end, waiting for more
        mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db)
        deadline = time.monotonic() + 10
        kinds: list[str] = []
        heartbeats: list[ClientEvent] = []
        for event in client.events(include_heartbeats=True):
            assert time.monotonic() < deadline
            if event.is_heartbeat:
                heartbeats.append(event)
                if len(heartbeats) == 3:
                    break
            elif event.raw.type_code != EventType.BINLOG_CHECKPOINT:
                # (MariaDB may write a BINLOG_CHECKPOINT late for an earlier rotation)
                kinds.append(event.raw.type_name)
        end = mariadb.binlog_position()
    assert kinds == ["ROTATE", "FORMAT_DESCRIPTION", "MARIADB_GTID", "QUERY"]
    assert client.heartbeats == 3
    # heartbeats say where the server's log ends, and do not move the stream position
    assert client.last_heartbeat == BinlogCoordinate(*end)
    assert client.position == BinlogCoordinate(*end)
    assert all(h.raw.offset is None for h in heartbeats)


def test_silent_server_is_detected_within_the_bound(
    sandbox_factory: Callable[..., MariadbSandbox],
) -> None:
    server = sandbox_factory()
    pid = int((server.dir / "mysqld.pid").read_text())
    with BinlogClient(options(server, heartbeat_period=0.5)) as client:
        events = client.events()
        assert next(events).raw.type_code == EventType.ROTATE
        os.kill(pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            with pytest.raises(ConnectionLostError, match="no event or heartbeat"):
                for _ in events:
                    pass
            waited = time.monotonic() - began
        finally:
            os.kill(pid, signal.SIGCONT)
    bound = 2 * 0.5 + 1.0  # ClientOptions.silence_timeout
    assert bound - 0.1 <= waited <= bound + 1.0


def test_server_restart_is_connection_lost(sandbox_factory: Callable[..., MariadbSandbox]) -> None:
    server = sandbox_factory()
    with BinlogClient(options(server, heartbeat_period=1.0)) as client:
        events = client.events()
        assert [next(events).raw.type_name for _ in range(2)] == ["ROTATE", "FORMAT_DESCRIPTION"]
        server.restart()
        with pytest.raises(ConnectionLostError) as lost:
            for _ in events:
                pass
    assert lost.value.retryable is True


def test_second_client_with_the_same_server_id_is_refused(mariadb: MariadbSandbox) -> None:
    server_id = next(_server_ids)
    with BinlogClient(options(mariadb, server_id=server_id, heartbeat_period=1.0)) as first:
        first.connect()
        second = BinlogClient(options(mariadb, server_id=server_id))
        with pytest.raises(
            ServerIdConflictError, match=f"registered on .* with server_id {server_id}"
        ) as e:
            second.connect()
    assert "give this reader a server_id no other replica uses" in str(e.value)


def test_replica_taking_our_server_id_ends_our_dump_with_a_conflict(
    mariadb: MariadbSandbox,
) -> None:
    server_id = next(_server_ids)
    with BinlogClient(options(mariadb, server_id=server_id, heartbeat_period=1.0)) as client:
        events = client.events()
        assert next(events).raw.type_code == EventType.ROTATE
        # another tool (not headwater) registers and dumps with the same server_id
        other = mariadb.connect()
        try:
            with other.cursor() as cur:
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            other._execute_command(COM_REGISTER_SLAVE, register_slave(server_id, host="other"))
            other._read_packet()
            file, pos = mariadb.binlog_position()
            other._execute_command(COM_BINLOG_DUMP, binlog_dump(file, pos, server_id))
            with pytest.raises(ServerIdConflictError, match="another replica uses") as e:
                for _ in events:
                    pass
        finally:
            other.close()
    assert f"server_id {server_id}" in str(e.value)


def test_wrong_password_is_an_authentication_error(mariadb: MariadbSandbox) -> None:
    mariadb.execute(
        "CREATE OR REPLACE USER 'hw_pw'@'%' IDENTIFIED BY 'right-one'",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'hw_pw'@'%'",
    )
    client = BinlogClient(
        ClientOptions(
            host=mariadb.host, port=mariadb.port, user="hw_pw", password="wr0ng-pw", server_id=7
        )
    )
    with pytest.raises(AuthenticationError, match="check the user name and the password") as e:
        client.connect()
    assert "wr0ng-pw" not in str(e.value) and "right-one" not in str(e.value)


def test_client_from_url_reads_the_password_from_the_environment(
    mariadb: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    mariadb.execute(
        "CREATE OR REPLACE USER 'hw_url'@'%' IDENTIFIED BY 'env-secret'",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'hw_url'@'%'",
    )
    monkeypatch.setenv("HEADWATER_SOURCE_PASSWORD", "env-secret")
    url = f"mysql://hw_url@{mariadb.host}:{mariadb.port}"
    with client_from_url(url, server_id=next(_server_ids), blocking=False) as client:
        events = list(client.events())
    assert events[0].raw.type_code == EventType.ROTATE
    assert client.info.user == "'hw_url'@'%'"


def test_dump_over_tls(sandbox_factory: Callable[..., MariadbSandbox], tmp_path: Path) -> None:
    def self_signed(name: str) -> tuple[Path, Path]:
        cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
                *("-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert)),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        return cert, key

    cert, key = self_signed("server")
    stranger, _ = self_signed("stranger")
    server = sandbox_factory(extra=(f"--ssl-cert={cert}", f"--ssl-key={key}"))
    server.execute(
        "CREATE USER 'hw_tls'@'%' REQUIRE SSL",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'hw_tls'@'%'",
        "CREATE DATABASE d",
        "CREATE TABLE d.t (id INT PRIMARY KEY)",
        "INSERT INTO d.t VALUES (1)",
        "FLUSH BINARY LOGS",
    )
    base: dict[str, Any] = {"host": server.host, "port": server.port, "user": "hw_tls"}
    base.update(blocking=False, start=BinlogCoordinate("mysql-bin.000001", 4))
    tls = TlsOptions(ca=str(cert), verify_cert=True)
    with BinlogClient(ClientOptions(**base, server_id=31, tls=tls)) as client:
        events = list(client.events())
    assert len(real_events(events, "mysql-bin.000001")) > 10
    assert real_events(events, "mysql-bin.000001") == file_events(server, "mysql-bin.000001", 4)
    # the certificate is checked against the CA we give: another CA fails the handshake
    wrong = TlsOptions(ca=str(stranger), verify_cert=True)
    with pytest.raises(SourceError, match=r"TLS to .* failed .*CERTIFICATE_VERIFY_FAILED") as e:
        BinlogClient(ClientOptions(**base, server_id=32, tls=wrong)).connect()
    assert not isinstance(e.value, ConnectionLostError)
