"""Small micro-batches applied in the driver (headwater.pipeline.direct) leave the target
exactly as Spark jobs do.

One reader task captures a seeded random workload (inserts, updates, key updates,
deletes, multi-statement transactions) with a DDL in its middle; two pipelines read it:
one with ``driverApplyMaxRows: 0`` (a Spark job), one in micro-batches of at most 40 rows
(``maxRowsPerTrigger``) with the default (every batch but the first in the driver). Both
targets must equal the source, row by row and by checksum. A batch replayed in the driver
after it was committed changes nothing (the sink's checkpoint rows skip it).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox
from tests.integration.test_pipeline_e2e import Workload, assert_synced, mysql_checksum, reader
from tests.integration.test_reader_capture import Running, wait_caught_up

__all__ = ["reader"]  # the fixture, used by name


def _config(path: Path, task_dir: Path, src: str, dst: str, target: MariadbSandbox, direct: bool):
    options = "{maxRowsPerTrigger: '40'}" if direct else "{driverApplyMaxRows: '0'}"
    path.write_text(
        f"name: {path.stem}\n"
        f"source:\n  path: {task_dir}\n  options: {options}\n"
        f"checkpoint: {path.parent / ('ck_' + path.stem)}\n"
        "transforms:\n"
        f"  - rename_database: {{{src}: {dst}}}\n"
        f"sinks:\n  - type: mysql\n    host: {target.host}\n    port: {target.port}\n"
        "    user: root\n    create_tables: true\n    shards: 2\n    ddl: evolve\n"
    )
    return path


def _run(spark: SparkSession, path: Path) -> PipelineRunner:
    runner = PipelineRunner(load_pipeline_config(path), spark=spark)
    query = runner.start(available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return runner


def test_driver_batches_give_the_state_spark_batches_give(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    workload = Workload(mariadb, db, seed=11)
    workload.run(30)
    mariadb.execute("ALTER TABLE orders MODIFY note VARCHAR(200) NULL", database=db)
    workload.run(30)
    wait_caught_up(running.task, mariadb)
    targets = {}
    for direct in (False, True):
        dst = f"{db}_{'drv' if direct else 'spk'}"[:60]
        mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
        path = _config(tmp_path / f"p_{direct}.yaml", task_dir, db, dst, mariadb_target, direct)
        runner = _run(spark, path)
        targets[direct] = (dst, runner)
        assert_synced(mariadb, db, mariadb_target, None, dst)
    spark_runner, driver_runner = targets[False][1], targets[True][1]
    assert spark_runner.writer.direct is None
    assert driver_runner.writer.direct is not None
    applied = driver_runner.writer.direct.batches
    # batch 0 (no offset before it in the log) is Spark's; the others, of 40 rows at
    # most, the driver's (60 transactions of 1-4 statements)
    assert 0 not in applied and len(applied) >= 2
    assert sum(b.rows_in for b in applied.values()) > 40
    assert all(b.rows_out == b.rows_in for b in applied.values())
    # the widened column reached both targets in its order among the changes
    for dst, _runner in targets.values():
        width = mariadb_target.query(
            "SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS"
            f" WHERE TABLE_SCHEMA = '{dst}' AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'note'"
        )
        assert width == [(200,)], dst
    # a replay of the last batch in the driver is skipped by the checkpoint rows
    dst = targets[True][0]
    before = {t: mysql_checksum(mariadb_target, dst, t) for t in ("orders", "items")}
    last = max(applied)
    assert driver_runner.writer.direct.apply(last) is not None
    assert {t: mysql_checksum(mariadb_target, dst, t) for t in ("orders", "items")} == before
    for dst, _runner in targets.values():
        mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
