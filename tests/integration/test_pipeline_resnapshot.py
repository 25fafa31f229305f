"""A re-snapshot triggered by a signal row while the pipeline runs (headwater.pipeline.runner).

A live MariaDB source, a reader, and ``PipelineRunner.run`` streaming database A into
database B on a second MariaDB (bulk snapshot path) and into schema B on PostgreSQL
(general path). Once synced, both targets are damaged (rows deleted, rows changed behind
the pipeline's back); then, with a random workload still running on the source, a
snapshot signal is inserted into the signal table (``send_signal``, what
``headwater snapshot --signal`` does). The runner pauses the stream, re-snapshots the
tables under its own checkpoint identity, resumes; after catch-up every target table
equals its source row by row and by checksum, and the stream's checkpoint rows and the
re-snapshot's are separate. A signal naming a missing table does not stop the stream.
"""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pymysql
from pyspark.sql import SparkSession

from headwater.config import FilterConfig
from headwater.connections import SourceConnection
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox
from headwater.snapshot.signals import send_signal
from tests.integration.test_pipeline_e2e import (
    TABLES,
    Workload,
    assert_synced,
    mysql_checksum,
    pg_checksum,
    write_config,
)
from tests.integration.test_reader_capture import Running, source_config, start_at


def _synced(source: MariadbSandbox, db: str, target: MariadbSandbox, pg: dict[str, Any]) -> bool:
    """Every table's checksum equal in both targets (False while a target table is
    missing)."""
    for table in TABLES:
        want = mysql_checksum(source, db, table)
        try:
            if mysql_checksum(target, "b", table) != want or pg_checksum(pg, "b", table) != want:
                return False
        except (pymysql.err.OperationalError, pymysql.err.ProgrammingError, psycopg.Error):
            return False
    return True


def _wait(predicate: Any, timeout: float, what: str, errors: list[BaseException]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert not errors, f"the pipeline failed: {errors[0]!r}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def test_signal_resnapshots_damaged_targets_while_the_workload_runs(
    mariadb: MariadbSandbox,
    db: str,
    mariadb_target: MariadbSandbox,
    postgres: dict[str, Any],
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    signal_table = f"{db}.hw_signal"
    workload = Workload(mariadb, db, 11)
    workload.create()
    reader = Running(
        source_config(
            mariadb,
            f"resnap_{abs(hash(db)) % 10**6}",
            start=start_at(mariadb),
            filters=FilterConfig(include=(f"{db}\\..*",)),
        ),
        tmp_path / "task",
    )
    workload.run(150)
    path = write_config(
        tmp_path / "p.yaml", tmp_path / "task", src_db=db, dst_db="b",
        target=mariadb_target, pg=postgres, name="resnap",
    )  # fmt: skip
    path.write_text(
        path.read_text()
        + f"snapshot:\n  host: {mariadb.host}\n  port: {mariadb.port}\n  user: root\n"
        f"  signal_table: {signal_table}\n  chunk_rows: 40\n"
    )
    runner = PipelineRunner(load_pipeline_config(path), spark=spark)
    stop = threading.Event()
    errors: list[BaseException] = []

    progress = io.StringIO()

    def run() -> None:
        try:
            runner.run(stop=stop, progress=progress)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        _wait(lambda: _synced(mariadb, db, mariadb_target, postgres), 180, "the first sync",
              errors)  # fmt: skip

        # Damage both targets behind the pipeline's back.
        mariadb_target.execute(
            "DELETE FROM b.orders ORDER BY id LIMIT 7",
            "UPDATE b.items SET sku = 'damaged' ORDER BY order_id, line LIMIT 9",
        )
        with psycopg.connect(**postgres, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM b.items WHERE (order_id, line) IN"
                " (SELECT order_id, line FROM b.items ORDER BY 1, 2 LIMIT 6)"
            )
            conn.execute("UPDATE b.orders SET note = 'damaged'"
                         " WHERE id IN (SELECT id FROM b.orders ORDER BY id LIMIT 5)")  # fmt: skip
        assert not _synced(mariadb, db, mariadb_target, postgres)

        # The signal, in the middle of a running workload.
        busy = threading.Thread(target=workload.run, args=(150,))
        busy.start()
        time.sleep(0.3)
        ident = send_signal(
            SourceConnection(mariadb.host, mariadb.port, "root"),
            [f"{db}.orders", f"{db}.items"],
            table=signal_table,
        )
        busy.join(120)
        _wait(lambda: len(runner.resnapshots) == 1, 240, "the re-snapshot", errors)
        result = runner.resnapshots[0]
        assert result.rows > 0
        _wait(lambda: _synced(mariadb, db, mariadb_target, postgres), 180,
              "the sync after the re-snapshot", errors)  # fmt: skip
        assert_synced(mariadb, db, mariadb_target, postgres, "b")

        # The stream's checkpoint rows and the re-snapshot's are apart.
        pipelines = {
            str(p)
            for (p,) in mariadb_target.query(
                "SELECT DISTINCT pipeline FROM headwater.headwater_checkpoint"
                " WHERE pipeline LIKE 'resnap%'"  # the target server is shared by tests
            )
        }
        assert pipelines == {"resnap", f"resnap.resnap.{ident}"}
        assert not (tmp_path / "ck_resnap" / "resnapshot-pending.json").exists()

        # A signal naming a table that does not exist is reported, not fatal: the
        # stream goes on.
        send_signal(
            SourceConnection(mariadb.host, mariadb.port, "root"),
            [f"{db}.no_such_table"],
            table=signal_table,
        )
        workload.run(20)
        _wait(lambda: "failed" in progress.getvalue(), 120, "the bad signal's report", errors)
        assert (
            f"{db}.no_such_table" in progress.getvalue() or "no_such_table" in progress.getvalue()
        )
        _wait(lambda: _synced(mariadb, db, mariadb_target, postgres), 180,
              "the sync after a bad signal", errors)  # fmt: skip
        assert len(runner.resnapshots) == 1
        assert not (tmp_path / "ck_resnap" / "resnapshot-pending.json").exists()
    finally:
        stop.set()
        thread.join(180)
        reader.stop()
    assert not errors, errors


def test_cli_signal_inserts_a_snapshot_request_into_the_configured_table(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    config = tmp_path / "p.yaml"
    config.write_text(
        f"name: sig\nsource: {{path: {tmp_path / 'task'}}}\ncheckpoint: {tmp_path / 'ck'}\n"
        "sinks: [{type: parquet_log, path: out}]\n"
        f"snapshot: {{host: {mariadb.host}, port: {mariadb.port}, signal_table: {db}.sig}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "snapshot", "--config", str(config),
         "--tables", f"{db}.a, {db}.b", "--source", f"mysql://root@{mariadb.host}:{mariadb.port}",
         "--signal"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    sent = orjson.loads(out.strip().splitlines()[-1])
    assert sent["table"] == f"{db}.sig"
    assert sent["tables"] == [f"{db}.a", f"{db}.b"]
    rows = mariadb.query(f"SELECT id, type, data FROM `{db}`.sig")
    assert len(rows) == 1
    assert rows[0][0] == sent["signal"]
    assert rows[0][1] == "snapshot"
    assert orjson.loads(rows[0][2]) == {"tables": [f"{db}.a", f"{db}.b"]}
