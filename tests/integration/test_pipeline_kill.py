"""``headwater pipeline run`` killed with SIGKILL at random points during a workload, and
restarted from its checkpoint, still leaves the target equal to the source, and applies no
batch twice; SIGTERM stops it cleanly (exit 0) with progress lines on stderr.

"Applied twice" is checked two ways on the MariaDB target: triggers log every row the sink
writes as (table, key, version), and the workload never produces the same (key, version)
state twice (fresh keys, every update bumps ``version``), so a duplicate in that log is a
change applied again; and each checkpoint row advanced at most once per batch id.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from headwater.sandbox import MariadbSandbox
from tests.integration.test_pipeline_e2e import (  # noqa: F401  (reader is a fixture)
    TABLES,
    Workload,
    assert_synced,
    mysql_checksum,
    reader,
    write_config,
)
from tests.integration.test_reader_capture import Running, wait_caught_up

AUDIT = [
    "CREATE TABLE audit (tbl VARCHAR(10), k1 INT, k2 INT, version INT)",
    "CREATE TRIGGER orders_ai AFTER INSERT ON orders FOR EACH ROW"
    " INSERT INTO audit VALUES ('orders', NEW.id, 0, NEW.version)",
    "CREATE TRIGGER orders_au AFTER UPDATE ON orders FOR EACH ROW"
    " INSERT INTO audit VALUES ('orders', NEW.id, 0, NEW.version)",
    "CREATE TRIGGER items_ai AFTER INSERT ON items FOR EACH ROW"
    " INSERT INTO audit VALUES ('items', NEW.order_id, NEW.line, NEW.version)",
    "CREATE TRIGGER items_au AFTER UPDATE ON items FOR EACH ROW"
    " INSERT INTO audit VALUES ('items', NEW.order_id, NEW.line, NEW.version)",
]


def start_pipeline(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headwater.cli.main",
                "pipeline",
                "run",
                "--config",
                str(config),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def applies(target: MariadbSandbox) -> int:
    """Transactions the sink has committed for this pipeline (0 before its first)."""
    exists = target.query(
        "SELECT COUNT(*) FROM information_schema.tables"
        " WHERE table_schema = 'headwater' AND table_name = 'headwater_checkpoint'"
    )[0][0]
    if not exists:
        return 0
    rows = target.query(
        "SELECT COALESCE(SUM(applies), 0) FROM headwater.headwater_checkpoint"
        " WHERE pipeline = 'kill'"
    )
    return int(rows[0][0]) if rows else 0


def progress_lines(log: Path) -> int:
    return log.read_text(errors="replace").count("pipeline kill: batch=") if log.exists() else 0


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
def test_sigkill_and_restart_during_workload_applies_nothing_twice(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    dst = f"{db}_kill"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", f"CREATE DATABASE `{dst}`")
    if applies(mariadb_target):  # a previous run's checkpoint rows
        mariadb_target.execute("DELETE FROM headwater.headwater_checkpoint WHERE pipeline = 'kill'")
    mariadb_target.execute(*(ddl for ddl, _, _ in TABLES.values()), *AUDIT, database=dst)
    config = write_config(
        tmp_path / "pipeline.yaml",
        task_dir,
        src_db=db,
        dst_db=dst,
        target=mariadb_target,
        name="kill",
        ddl="skip",  # the target tables exist already (with the audit triggers)
        sliced=False,  # small micro-batches: one slice, applied without a shuffle
    )
    config.write_text(config.read_text().replace("progress: 1\n", "progress: 0.5\n"))
    log = tmp_path / "pipeline.log"
    rng = random.Random(11)
    workload = Workload(mariadb, db, seed=7)
    done = threading.Event()

    def produce() -> None:
        try:
            for _ in range(60):
                workload.run(10)
                time.sleep(1.0)  # spreads the workload over the kills; not synchronization
        finally:
            done.set()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    kills = 0
    try:
        while kills < 4:
            before = progress_lines(log)
            proc = start_pipeline(config, log)
            try:
                # Kill at a random point once this run has finished a batch.
                wait_until(
                    lambda p=proc, b=before: (
                        p.poll() is not None or progress_lines(log) > b or done.is_set()
                    ),
                    90,
                    "the pipeline to finish a batch",
                )
                assert proc.poll() is None, log.read_text()[-3000:]
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=rng.uniform(0.0, 2.0))
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
            kills += 1
    finally:
        producer.join(120)
    assert done.is_set() and kills == 4
    wait_caught_up(running.task, mariadb, timeout=60)

    # Restart once more; once it runs and the target matches, SIGTERM must stop it cleanly.
    started_before = log.read_text().count("pipeline kill: started")
    proc = start_pipeline(config, log)
    try:
        expected = {t: mysql_checksum(mariadb, db, t) for t in TABLES}
        wait_until(
            lambda: (
                proc.poll() is not None
                or (
                    log.read_text().count("pipeline kill: started") > started_before
                    and all(mysql_checksum(mariadb_target, dst, t) == expected[t] for t in TABLES)
                )
            ),
            120,
            "the restarted pipeline to start and catch up",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_synced(mariadb, db, mariadb_target, None, dst)
    assert "pipeline kill: batch=" in log.read_text()
    duplicates = mariadb_target.query(
        "SELECT tbl, k1, k2, version, COUNT(*) FROM audit GROUP BY tbl, k1, k2, version"
        " HAVING COUNT(*) > 1",
        database=dst,
    )
    assert duplicates == []
    for shard, batch_id, n in mariadb_target.query(
        "SELECT shard, batch_id, applies FROM headwater.headwater_checkpoint"
        " WHERE pipeline = 'kill'"
    ):
        assert n <= batch_id + 1, f"shard {shard}: {n} applies in batches 0..{batch_id}"
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
