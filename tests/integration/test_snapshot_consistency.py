"""A snapshot taken while a workload updates, deletes and re-inserts rows, followed by the
stream from the record after it, leaves the target equal to the source.

Four key shapes (dense integer, composite int+string, string in a case-insensitive
collation, skewed BIGINT), chunks of 250 rows in waves of 6 chunks, so that many chunks
read under concurrent changes and many windows and catch-ups are non-empty. Run through
both paths of a chunk: the bulk path (LOAD DATA into the MariaDB target, window changes
through the sink) and the general one (every row a change row through the sink).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from headwater.connections import SourceConnection
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.pipeline.snapshots import run_snapshot, stream_config
from headwater.sandbox import MariadbSandbox
from headwater.snapshot import SnapshotOptions
from headwater.snapshot.state import SnapshotState
from tests.integration.snapshot_support import (  # noqa: F401  (captured is a fixture)
    SHAPES,
    Churn,
    assert_equal,
    captured,
    pipeline_yaml,
)
from tests.integration.test_reader_capture import Running, wait_caught_up

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "general"])
def test_snapshot_under_concurrent_changes_then_stream_equals_source(
    bulk: bool,
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    captured: tuple[Running, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    running, task_dir = captured
    dst = f"{db}_copy"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", "DROP DATABASE IF EXISTS hw_snap")
    config = load_pipeline_config(pipeline_yaml(tmp_path / "p.yaml", task_dir, src=db, dst=dst,
                                                target=mariadb_target))  # fmt: skip
    wait_caught_up(running.task, mariadb)
    tables = ",".join(f"{db}.{t}" for t in SHAPES)
    with Churn(mariadb, db, seed=11) as churn:
        result = run_snapshot(
            spark,
            config,
            connection=SourceConnection(mariadb.host, mariadb.port, "root"),
            tables=tables,
            options=SnapshotOptions(chunk_rows=250, wave_chunks=6, timeout_s=30, bulk=bulk),
        )
    assert churn.statements > 200, "the workload must overlap the snapshot"
    state = SnapshotState.load(str(config.checkpoint / "snapshot.json"))
    assert state is not None and not state.pending()
    methods = {name.split(".")[1]: t["method"] for name, t in state.tables.items()}
    assert methods == {"ints": "even", "comp": "seek", "strs": "seek", "skew": "seek"}
    assert {d["path"] for d in state.done.values()} == {"bulk" if bulk else "rows"}
    windows = sum(d["window_changes"] for d in state.done.values())
    assert windows > 0, "some chunk must have reconciled changes from its window"
    assert result.progress["chunks_done"] == result.progress["chunks_total"] == len(state.done)

    wait_caught_up(running.task, mariadb)
    runner = PipelineRunner(stream_config(config, result), spark=spark)
    query = runner.start(available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    assert_equal(mariadb, db, mariadb_target, dst)
