"""The reader survives being killed, fails over to a replica, and refuses bad sources clearly.

* ``headwater reader run`` as a subprocess is SIGKILLed at random points while a workload
  runs and restarted; in the end the change log holds exactly the server's transactions
  (GTID list and row contents, against the binlog files read independently);
* two MariaDB servers, the second a replica of the first: the task is pointed at the replica
  (second host of the source) once the primary stops; change_id bumps, nothing is lost or
  duplicated;
* bad sources (STATEMENT format, wrong password, missing privilege, purged start) stop the
  task in state ``failed`` with an error that names the problem, while other tasks run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from headwater.config import BackoffConfig, HostConfig, StartConfig
from headwater.position import BinlogCoordinate
from headwater.reader.task import ReaderTask, read_task_status
from headwater.sandbox import MariadbSandbox
from tests.integration.test_reader_capture import (
    Running,
    assert_same_changes,
    source_config,
    start_at,
    wait_caught_up,
    wait_for,
)


def _write_config(path: Path, server: MariadbSandbox, start: BinlogCoordinate, data: Path) -> None:
    path.write_text(
        f"""
data_dir: {data}
sources:
  - name: killed
    host: {server.host}
    port: {server.port}
    user: root
    server_id: 7301
    heartbeat_period: 0.5
    state_interval: 0.05
    start: {{file: {start.file}, offset: {start.offset}}}
    filters:
      include: ['k\\..*']
    reconnect: {{initial: 0.05, max: 0.5}}
"""
    )


def _reader(config: Path) -> subprocess.Popen[bytes]:
    with open(config.parent / "reader.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "reader", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


@pytest.mark.slow
def test_sigkill_at_random_points_loses_and_duplicates_nothing(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=21)
    server.execute("CREATE DATABASE k", "CREATE TABLE k.t (id INT PRIMARY KEY, v VARCHAR(40))")
    start = start_at(server).coordinate
    assert start is not None
    config = tmp_path / "reader.yaml"
    _write_config(config, server, start, tmp_path / "data")
    stop = threading.Event()

    def load() -> None:
        conn = server.connect("k")
        i = 0
        with conn.cursor() as cur:
            while not stop.is_set() and i < 50000:
                if i % 10 == 0:
                    cur.execute("BEGIN")
                    for j in range(5):
                        cur.execute(f"INSERT INTO t VALUES ({100000 + i * 10 + j}, 'batch')")
                    cur.execute("COMMIT")
                else:
                    cur.execute(f"INSERT INTO t VALUES ({i}, 'v{i}')")
                i += 1
        conn.close()

    writer = threading.Thread(target=load)
    writer.start()
    rng = random.Random(7)
    try:
        for _ in range(4):
            proc = _reader(config)
            threading.Event().wait(rng.uniform(0.4, 1.5))  # let it read for a while
            proc.kill()
            proc.wait(10)
    finally:
        stop.set()
        writer.join(60)
    proc = _reader(config)
    try:
        target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
        task_dir = tmp_path / "data" / "killed"
        wait_for(
            lambda: (
                read_task_status(task_dir).get("pid") == proc.pid
                and read_task_status(task_dir).get("gtid_set") == target
            ),
            60,
            "the restarted reader to catch up",
        )
        # `reader status` from another process while the reader runs.
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "headwater.cli.main",
                "reader",
                "status",
                "--config",
                str(config),
                "--json",
            ],
            capture_output=True,
            check=True,
        )
        (status,) = json.loads(out.stdout)["tasks"]
        assert status["state"] == "running" and status["gtid_set"] == target
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "reader.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    after = read_task_status(task_dir)
    assert after["state"] == "stopped"
    got = assert_same_changes(server, start, task_dir, "k")
    assert (
        len(got)
        == int(server.query("SELECT COUNT(*) FROM k.t WHERE v <> 'batch'")[0][0])
        + int(server.query("SELECT COUNT(*) FROM k.t WHERE v = 'batch'")[0][0]) // 5
    )


@pytest.mark.slow
def test_failover_to_a_replica_continues_from_the_gtid_set(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    primary = sandbox_factory(server_id=31)
    replica = sandbox_factory(server_id=32)
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
        "MASTER_USER='root', MASTER_USE_GTID=slave_pos",
        "START SLAVE",
    )
    primary.execute("CREATE DATABASE f", "CREATE TABLE f.t (id INT PRIMARY KEY, v VARCHAR(40))")
    start = start_at(primary)
    config = source_config(
        primary,
        "failover",
        start=start,
        hosts=(HostConfig(primary.host, primary.port), HostConfig(replica.host, replica.port)),
        reconnect=BackoffConfig(initial=0.05, max=0.3),
    )
    run = Running(config, tmp_path / "task")
    try:
        conn = primary.connect("f")
        with conn.cursor() as cur:
            for i in range(40):
                cur.execute(f"INSERT INTO t VALUES ({i}, 'p{i}')")
        conn.close()
        wait_caught_up(run.task, primary)
        target = str(primary.query("SELECT @@gtid_binlog_pos")[0][0])
        wait_for(
            lambda: str(replica.query("SELECT @@gtid_slave_pos")[0][0]) == target,
            30,
            "the replica to catch up",
        )
        primary.stop()
        replica.execute("STOP SLAVE", "RESET SLAVE ALL")
        conn = replica.connect("f")
        with conn.cursor() as cur:
            for i in range(40, 70):
                cur.execute(f"INSERT INTO t VALUES ({i}, 'r{i}')")
            cur.execute("UPDATE t SET v = 'changed' WHERE id < 5")
        conn.close()
        wait_caught_up(run.task, replica, timeout=60)
        task = run.task
        assert task.change_id == 1
        assert [c.server_uuid for c in task.change_ids] == ["mariadb:31:0", "mariadb:32:0"]
    finally:
        run.stop()
    # The replica's binlog holds the primary's transactions too (log_slave_updates): the
    # oracle reads it whole, and the change log must equal it from the start GTID on.
    first = str(replica.query("SHOW BINARY LOGS")[0][0])
    from tests.integration.test_reader_capture import (
        changes_of,
        oracle_transactions,
        stored_records,
    )

    fde, expected = oracle_transactions(replica, BinlogCoordinate(first, 4))
    got = stored_records(tmp_path / "task")
    want = changes_of(expected, fde, "f")
    have = changes_of(got, fde, "f")
    assert len(have) == 70 + 5 and have == want[-len(have) :]
    assert [g[0] for g in have] == [g[0] for g in want if g[3] != "ddl"][-len(have) :]
    assert {r.position.change_id for r in got} == {0, 1}
    gtids = [r.gtid for r in got]
    assert len(gtids) == len(set(gtids))


def _failed(server: MariadbSandbox, tmp_path: Path, name: str, **kw: Any) -> ReaderTask:
    config = source_config(server, name, reconnect=BackoffConfig(0.01, 0.05), **kw)
    run = Running(config, tmp_path / name)
    wait_for(lambda: run.task.state in ("failed", "running"), 30, f"{name} to settle")
    run.thread.join(30)
    state = read_task_status(tmp_path / name)
    assert state["state"] == "failed"
    assert run.task.error == state["error"]
    return run.task


def test_statement_format_wrong_password_privilege_and_purged_start_fail_clearly(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=41)
    server.execute(
        "CREATE USER 'nopriv'@'%' IDENTIFIED BY 'pw'",
        "GRANT SELECT ON *.* TO 'nopriv'@'%'",
    )
    wrong = _failed(server, tmp_path, "wrongpw", password="not-the-password")
    assert wrong.error is not None and "AuthenticationError" in wrong.error
    assert "not-the-password" not in wrong.error

    nopriv = _failed(server, tmp_path, "nopriv", user="nopriv", password="pw")
    assert nopriv.error is not None and "PrivilegeError" in nopriv.error
    assert "GRANT REPLICATION SLAVE" in nopriv.error

    purged = _failed(
        server,
        tmp_path,
        "purged",
        start=StartConfig("file", coordinate=BinlogCoordinate("mysql-bin.000999", 4)),
    )
    assert purged.error is not None and "PositionPurgedError" in purged.error

    server.execute("SET GLOBAL binlog_format = 'STATEMENT'")
    try:
        stmt = _failed(server, tmp_path, "statement")
    finally:
        server.execute("SET GLOBAL binlog_format = 'ROW'")
    assert stmt.error is not None and "binlog_format is STATEMENT" in stmt.error


def test_a_failed_task_does_not_stop_the_others(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    from headwater.config import ReaderConfig
    from headwater.reader.service import ReaderService

    good = source_config(mariadb, "good", start=start_at(mariadb))
    bad = source_config(mariadb, "bad", password="wrong", reconnect=BackoffConfig(0.01, 0.05))
    service = ReaderService(ReaderConfig(tmp_path, (good, bad)))
    service.start()
    try:
        wait_for(lambda: service.tasks["bad"].state == "failed", 30, "bad to fail")
        mariadb.execute(
            "CREATE TABLE x (id INT PRIMARY KEY)", "INSERT INTO x VALUES (1)", database=db
        )
        wait_caught_up(service.tasks["good"], mariadb)
        status = service.status()
        by_name = {t["name"]: t for t in status["tasks"]}
        assert by_name["good"]["state"] == "running"
        assert (
            by_name["bad"]["state"] == "failed" and "AuthenticationError" in by_name["bad"]["error"]
        )
        assert by_name["good"]["transactions_stored"] >= 2
        assert status["metrics"]["tasks_failed"] == 1
        assert json.dumps(status)  # serializable for the HTTP server
        assert "wrong" not in json.dumps(status)
    finally:
        service.stop()
    assert os.path.exists(tmp_path / "good" / "state.json")
