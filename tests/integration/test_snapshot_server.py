"""Snapshots of a pipeline whose source is a reader's HTTP API (``server:``), in local
mode (issue #16; the cluster run is in test_spark_cluster.py).

* The HTTP change log (:class:`~headwater.snapshot.changelog.ServerLog`) answers what a
  snapshot asks exactly as the task directory does: table definitions, the seq of a
  binlog coordinate, the window's changes, the earliest seq; and its *processed* position
  moves past the last stored record when the reader filters transactions out (the
  ``saved_position`` of the task's status), so a chunk whose high watermark follows
  filtered transactions does not wait for its timeout.
* A snapshot under concurrent changes, read over HTTP with a bearer token given by
  ``token_file`` (the token travels inside the chunk tasks; it is in no state file and no
  ``repr``), then the stream from the record after it: the target equals the source.
* ``plan_snapshot`` decides ``when_needed`` from the API's retained range.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from headwater.connections import SourceConnection
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.pipeline.snapshots import run_snapshot, snapshot_log, stream_config
from headwater.reader.serving import LiveTaskHandle
from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions
from headwater.server.app import HeadwaterServer
from headwater.snapshot import SnapshotOptions
from headwater.snapshot.changelog import DirLog, LogRef, ServerLog
from headwater.snapshot.modes import plan_snapshot
from headwater.snapshot.state import SnapshotState
from headwater.snapshot.watermarks import Coordinate, caught_up, master_status
from tests.integration.snapshot_support import SHAPES, Churn, assert_equal, capture
from tests.integration.test_reader_capture import Running, wait_caught_up, wait_for

pytestmark = pytest.mark.integration

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

TOKEN = "tok-snapshot-3c9d"


@pytest.fixture
def served(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[tuple[Running, Path, str]]:
    """Tables filled before the reader's start, the reader task, and its HTTP API
    (bearer token ``TOKEN``): (running, task directory, API URL)."""
    for running, task_dir in capture(mariadb, db, tmp_path, 400):
        server = HeadwaterServer(
            {running.task.name: LiveTaskHandle.of(running.task)}, ServerOptions(token=TOKEN)
        ).start()
        try:
            yield running, task_dir, server.url
        finally:
            server.close()


def test_the_http_log_answers_as_the_task_directory_and_sees_filtered_progress(
    mariadb: MariadbSandbox, db: str, served: tuple[Running, Path, str]
) -> None:
    running, task_dir, url = served
    mariadb.execute("UPDATE ints SET n = n + 1 WHERE id < 5", database=db)
    wait_caught_up(running.task, mariadb)
    ref = LogRef(server=url, task=running.task.name, token=TOKEN)
    assert TOKEN not in repr(ref) and TOKEN not in ref.where()
    assert pickle.loads(pickle.dumps(ref)).token == TOKEN  # what an executor gets
    local, http = DirLog(task_dir), ServerLog(ref)
    try:
        assert http.table_def(db, "comp") == local.table_def(db, "comp") is not None
        assert http.change_id() == local.change_id()
        assert http.earliest_seq() == local.earliest_seq() == 1
        last = local.log.latest()
        assert last is not None
        start = Coordinate(last.position.file_num, last.position.offset)
        cid = local.change_id()
        assert http.first_seq_at(cid, start) == local.first_seq_at(cid, start) == last.seq
        tables = {(db, t) for t in SHAPES}
        got = [(c.table, c.op, c.sequence, c.after) for c in http.changes(1, last.seq, tables, "s")]
        want = [
            (c.table, c.op, c.sequence, c.after) for c in local.changes(1, last.seq, tables, "s")
        ]
        assert [(t, op) for t, op, _, _ in got].count(("ints", "update")) == 5
        assert got == want

        # Transactions the reader filters out: nothing is stored, yet the processed
        # position (state.json's, served as saved_position) moves past them.
        other = f"{db}_other"[:60]
        mariadb.execute(
            f"DROP DATABASE IF EXISTS `{other}`", f"CREATE DATABASE `{other}`",
            f"CREATE TABLE `{other}`.t (id INT PRIMARY KEY)",
            *(f"INSERT INTO `{other}`.t VALUES ({i})" for i in range(5)),
        )  # fmt: skip
        conn = mariadb.connect(db)
        try:
            high = master_status(conn)
            # Without the saved position the log's last record would be the processed
            # one, and the filtered transactions after it would keep caught_up false.
            wait_for(lambda: caught_up(http, conn, high), 20, "caught up past filtered ones")
            assert local.log.latest() == last  # nothing stored: all were filtered
            processed = http.processed()
            assert processed is not None and processed > start.key()
            assert processed == local.processed()
        finally:
            conn.close()
            mariadb.execute(f"DROP DATABASE IF EXISTS `{other}`")
    finally:
        local.close()
        http.close()


def test_snapshot_over_http_under_concurrent_changes_then_stream_equals_source(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    served: tuple[Running, Path, str],
    tmp_path: Path,
) -> None:
    running, _task_dir, url = served
    (tmp_path / "token").write_text(TOKEN + "\n")
    dst = f"{db}_http"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", "DROP DATABASE IF EXISTS hw_snaph")
    path = tmp_path / "p.yaml"
    path.write_text(
        f"name: snaph\nsource:\n  server: {url}\n  task: {running.task.name}\n"
        f"  token_file: {tmp_path / 'token'}\ncheckpoint: {tmp_path / 'ck'}\n"
        f"transforms:\n  - rename_database: {{{db}: {dst}}}\n"
        f"sinks:\n  - type: mysql\n    host: {mariadb_target.host}\n"
        f"    port: {mariadb_target.port}\n    user: root\n    create_tables: true\n"
        "    shards: 2\n    checkpoint_database: hw_snaph\n"
    )
    config = load_pipeline_config(path)
    log = snapshot_log(config)
    assert log == LogRef(server=url, task=running.task.name) and log.token == TOKEN
    assert plan_snapshot("initial", checkpoint=config.checkpoint, log=log)
    wait_caught_up(running.task, mariadb)
    tables = ",".join(f"{db}.{t}" for t in SHAPES)
    with Churn(mariadb, db, seed=23, rows=400) as churn:
        result = run_snapshot(
            spark,
            config,
            connection=SourceConnection(mariadb.host, mariadb.port, "root"),
            tables=tables,
            options=SnapshotOptions(chunk_rows=200, wave_chunks=8, timeout_s=30, bulk=False),
        )
    assert churn.statements > 50, "the workload must overlap the snapshot"
    state_file = config.checkpoint / "snapshot.json"
    state = SnapshotState.load(str(state_file))
    assert state is not None and not state.pending()
    assert (state.task_dir, state.server, state.task) == (None, url, running.task.name)
    assert TOKEN not in state_file.read_text()
    assert {d["path"] for d in state.done.values()} == {"rows"}
    assert sum(d["window_changes"] for d in state.done.values()) > 0
    assert result.rows >= 4 * 300

    wait_caught_up(running.task, mariadb)
    runner = PipelineRunner(stream_config(config, result), spark=spark)
    query = runner.start(available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    assert_equal(mariadb, db, mariadb_target, dst)

    # when_needed: the stored position is retained by the API's log: no snapshot.
    assert not plan_snapshot("when_needed", checkpoint=config.checkpoint, log=log)
    assert not plan_snapshot("initial", checkpoint=config.checkpoint, log=log)
