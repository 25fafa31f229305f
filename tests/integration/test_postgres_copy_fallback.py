"""The PostgreSQL sink's direct ``COPY`` on the net path and its fallback, provoked on a
live server (headwater.sinks.netwrite, ``_Writer._pg_direct``).

Upserts of an integer key go by ``COPY`` straight into the target table when the table
holds no row in the upserts' key range (one probe); a unique violation all the same goes
back to the savepoint and the staged upsert (temporary table, ``INSERT ... SELECT ... ON
CONFLICT``) runs. The violation is produced the way the code names it, by a concurrent
writer: another session inserts one of the batch's keys and keeps its transaction open,
so the probe (READ COMMITTED: it does not see uncommitted rows) finds the range empty and
the ``COPY`` waits on that key's index entry (PostgreSQL waits for the inserting
transaction before deciding uniqueness: "Index Uniqueness Checks" in the manual's index
access method chapter). The test sees the ``COPY`` into the table itself waiting on a
lock (``pg_stat_activity``), commits the other session, and then asserts: the batch was
applied by the net path (``NetApply.batches``) in one attempt (the driver's DEBUG line of
each shard's ``ApplyResult``), the concurrent row overwritten by the batch's image
(target equal to the source, every row), and the shard's checkpoint advanced once to the
range's last sequence.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from headwater.config import FilterConfig
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_caught_up

CHECKPOINT = (
    "SELECT shard, max_sequence, applies, batch_id FROM headwater.headwater_checkpoint"
    " WHERE pipeline = %s AND shard >= 0 ORDER BY shard"
)


def _run(spark: SparkSession, path: Path) -> PipelineRunner:
    runner = PipelineRunner(load_pipeline_config(path), spark=spark)
    query = runner.start(available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return runner


def _copy_waiting(pg: dict[str, Any], table: str, timeout: float = 60.0) -> str:
    """The statement of the backend running ``COPY <table>`` while it waits on a lock."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(**pg, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE %s",
                (f"COPY {table} %",),
            ).fetchone()
            if row is not None:
                return str(row[0])
            time.sleep(0.05)
    raise AssertionError(f"no COPY {table} waited on a lock")


def test_a_unique_violation_of_the_direct_copy_falls_back_to_the_staged_upsert(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    postgres: dict[str, Any],
    db: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    task_dir = tmp_path / "task"
    config = source_config(
        mariadb, "pgcopy", start=start_at(mariadb), filters=FilterConfig(include=(f"{db}\\..*",))
    )
    mariadb.execute(
        "CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(20) NULL, n INT NOT NULL)", database=db
    )
    running = Running(config, task_dir)
    dst = "pgcopy_dst"
    path = tmp_path / "pgcopy.yaml"
    path.write_text(
        "name: pgcopy\n"
        f"source:\n  path: {task_dir}\n  options: {{driverApplyMaxRows: '0'}}\n"
        f"checkpoint: {tmp_path / 'ck'}\n"
        f"transforms:\n  - rename_database: {{{db}: {dst}}}\n"
        f"sinks:\n  - type: postgres\n    host: {postgres['host']}\n"
        f"    port: {postgres.get('port', 5432)}\n    user: {postgres['user']}\n"
        f"    database: {postgres['dbname']}\n    create_tables: true\n    shards: 1\n"
    )
    table = f'"{dst}"."p"'
    try:
        mariadb.execute(
            "INSERT INTO p VALUES " + ", ".join(f"({i}, 'v{i}', {i})" for i in range(1, 11)),
            database=db,
        )
        wait_caught_up(running.task, mariadb)
        _run(spark, path)  # batch 0 (the Spark job)
        with psycopg.connect(**postgres) as conn:
            before = conn.execute(CHECKPOINT, ("pgcopy",)).fetchall()
        assert [r[2] for r in before] == [1]
        # batch 1: new keys above the target's (the direct COPY's case), a delete
        mariadb.execute(
            "INSERT INTO p VALUES " + ", ".join(f"({i}, 'new{i}', {i})" for i in range(1000, 1100)),
            "UPDATE p SET v = 'changed', n = -n WHERE id BETWEEN 1040 AND 1060",
            "DELETE FROM p WHERE id = 5",
            database=db,
        )
        wait_caught_up(running.task, mariadb)
        intruder = psycopg.connect(**postgres)  # a concurrent writer, uncommitted
        try:
            intruder.execute(f"INSERT INTO {table} VALUES (1050, 'intruder', 0)")
            caplog.set_level(logging.DEBUG, logger="headwater.pipeline.netapply")
            runner = PipelineRunner(load_pipeline_config(path), spark=spark)
            query = runner.start(available_now=True)
            waiting = _copy_waiting(postgres, table)
            assert waiting.startswith(f"COPY {table} (") and waiting.endswith("FROM STDIN")
            intruder.commit()
        finally:
            intruder.close()
        query.awaitTermination()
        assert query.exception() is None, query.exception()

        net = runner.writer.net
        assert net is not None and set(net.batches) == {1}  # the net path applied it
        plan = net.plan_of(1)
        assert plan is not None
        net.close()
        messages = [
            r.getMessage() for r in caplog.records if r.name == "headwater.pipeline.netapply"
        ]
        assert not [m for m in messages if "takes the Spark path" in m and m.startswith("batch 1")]
        results = [m for m in messages if m.startswith("batch 1: ApplyResult(")]
        assert len(results) == 1, messages
        assert re.search(r"shard=0, batch_id=1, upserts=100, deletes=1, .*attempts=1\)", results[0])

        source = mariadb.query("SELECT id, v, n FROM p ORDER BY id", database=db)
        with psycopg.connect(**postgres) as conn:
            got = conn.execute(f"SELECT id, v, n FROM {table} ORDER BY id").fetchall()
            after = conn.execute(CHECKPOINT, ("pgcopy",)).fetchall()
        assert len(source) == 109 and (1050, "changed", -1050) in source
        assert got == [tuple(r) for r in source]
        assert after == [(0, plan.last_sequence, before[0][2] + 1, 1)]
    finally:
        running.stop()
