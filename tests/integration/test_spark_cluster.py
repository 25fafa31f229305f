"""Pipelines on a real Spark standalone cluster (issue #16): a master and two workers from
PySpark's own launcher, each worker isolated in its own mount namespace (a private /tmp:
it sees none of the driver's or the test's directories), see cluster_support.py.

* executors cannot see a driver-only path (the isolation is real), yet get a password
  given by ``password_env`` on the driver only (it travels inside the task), and tasks
  run on both workers (their work directories hold executor logs);
* the file sinks' shared-directory check passes for a directory every machine mounts at
  the same path, and refuses a driver-local one: ``headwater pipeline run`` exits 2 with
  one ``headwater: error:`` line naming the sink's path (before: exit 0, empty output);
* rows that exist before the reader's start position, loaded by a snapshot of a
  ``server:`` source on the cluster (``headwater snapshot``: chunks read on the
  executors, the change log's window over the reader's HTTP API), then the stream from
  the record after it (``starting_position``, as ``--mode initial`` does) under a
  workload with DDL, into MariaDB (password_env on the driver only), PostgreSQL and a
  Parquet change log and mirror on the shared directory: verify exits 0 for both
  targets; the mirror read by Spark (a local session) and by DuckDB equals the source
  row by row, and so does the change log replayed in sequence order; the snapshot's and
  the stream's executors ran on both workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from tests.integration.cluster_support import Cluster, standalone_cluster

pytestmark = pytest.mark.integration

SECRET = "pw-cluster-7b1e"

DRIVER = r"""
import json, os, sys
from headwater.connections import TargetConnection
from headwater.errors import ConfigError
from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.sharedpaths import check_shared
from headwater.spark.session import build_session

master, shared, local, driver_only = sys.argv[1:5]
spark = build_session(master, "hw-cluster-test", conf={"spark.ui.enabled": "false"})
sc = spark.sparkContext
width = 4
out = {"driver_sees": os.path.exists(driver_only)}
out["executor_sees"] = sc.parallelize(range(width), width).map(
    lambda _: os.path.exists(driver_only)).collect()
out["executor_env"] = sc.parallelize(range(width), width).map(
    lambda _: os.environ.get("HW_CLUSTER_PW")).collect()
conn = TargetConnection(host="db", password_env="HW_CLUSTER_PW")
out["executor_password"] = sc.parallelize(range(width), width).map(
    lambda _: conn.password()).collect()

def config(path):
    return parse_pipeline_config(
        f"name: c\nsource:\n  path: {local}\ncheckpoint: {local}/ck\n"
        f"sinks:\n  - type: parquet_log\n    path: {path}\n",
        file=f"{local}/p.yaml", env={})

check_shared(spark, config(f"{shared}/out"))
out["shared_ok"] = True
try:
    check_shared(spark, config(f"{local}/out"))
    out["local_error"] = None
except ConfigError as e:
    out["local_error"] = str(e)
print("RESULT " + json.dumps(out))
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with standalone_cluster(workers=2, cores=1) as c:
        yield c


def driver_env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


def test_isolated_workers_get_secrets_from_the_driver_and_share_only_shared_paths(
    cluster: Cluster, tmp_path: Path
) -> None:
    driver_only = tmp_path / "driver-only"
    driver_only.write_text("x")
    env = {**driver_env(), "HW_CLUSTER_PW": SECRET}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster.master, str(cluster.shared), str(tmp_path),
         str(driver_only)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = orjson.loads(line.removeprefix("RESULT "))
    assert out["driver_sees"] is True
    assert out["executor_sees"] == [False] * 4  # the workers are isolated from /tmp
    assert out["executor_env"] == [None] * 4  # not in the workers' environment...
    assert out["executor_password"] == [SECRET] * 4  # ...but carried inside the task
    assert out["shared_ok"] is True
    assert out["local_error"] is not None and "is not shared" in out["local_error"]
    assert "sinks[0].path" in out["local_error"] and str(tmp_path / "out") in out["local_error"]
    # Executor logs: tasks ran on both workers.
    for work in cluster.work_dirs:
        stderr_files = list(work.glob("app-*/*/stderr"))
        assert stderr_files, f"no executor ran on {work}"
    assert SECRET not in "".join(
        p.read_text(errors="replace") for p in cluster.shared.rglob("*") if p.is_file()
    )


def test_pipeline_refuses_a_file_sink_path_the_executors_cannot_share(
    cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "task" / "changes").mkdir(parents=True)
    config = tmp_path / "p.yaml"
    config.write_text(
        f"name: refuse\nsource:\n  path: {tmp_path / 'task'}\ncheckpoint: {tmp_path / 'ck'}\n"
        f"spark: {{conf: {{spark.ui.enabled: 'false'}}}}\n"
        f"sinks:\n  - type: parquet_log\n    path: {tmp_path / 'out'}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "pipeline", "run", "--config",
         str(config), "--master", cluster.master, "--available-now"],
        capture_output=True, text=True, env=driver_env(), timeout=600,
    )  # fmt: skip
    errors = [x for x in proc.stderr.splitlines() if x.startswith("headwater: error:")]
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert len(errors) == 1, proc.stderr[-4000:]
    assert "is not shared" in errors[0] and "sinks[0].path" in errors[0], errors[0]
    assert str(tmp_path / "out") in errors[0]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").glob("_headwater-probe-*"))  # probes cleaned up


def test_snapshot_then_stream_from_a_reader_api_into_mariadb_postgres_and_parquet_on_the_cluster(
    cluster: Cluster,
    spark: Any,
    mariadb: Any,
    mariadb_target: Any,
    postgres: dict[str, Any],
    db: str,
    tmp_path: Path,
) -> None:
    """Rows before the reader's start, a reader serving HTTP, a workload; ``headwater
    snapshot --mode initial`` on the cluster (the snapshot, then the stream from the
    record after it in the same application), more workload with DDL meanwhile, SIGTERM
    once the targets caught up: server source (schema from /v1/decoding, the
    snapshot's window over HTTP), a MariaDB target whose password is in ``password_env``
    on the driver only, PostgreSQL, and a Parquet change log and mirror on the shared
    directory. Afterwards every target equals the source."""
    import psycopg

    from headwater.config import parse_reader_config
    from headwater.reader.service import ReaderService
    from headwater.snapshot.state import SnapshotState
    from tests.integration.test_pipeline_e2e import TABLES, Workload, assert_synced
    from tests.integration.test_reader_capture import wait_caught_up

    workload = Workload(mariadb, db, seed=16)
    workload.create()
    workload.run(30)  # before the reader's start: only the snapshot can load these rows
    file, offset = mariadb.binlog_position()
    reader_config = parse_reader_config(
        f"data_dir: {tmp_path / 'data'}\nserver: {{listen: '127.0.0.1:0'}}\nsources:\n"
        f"  - name: live\n    host: {mariadb.host}\n    port: {mariadb.port}\n"
        f"    user: root\n    server_id: 9216\n    heartbeat_period: 0.5\n"
        f"    start: {{file: {file}, offset: {offset}}}\n"
        f"    filters: {{include: ['{db}\\..*']}}\n",
        env={},
    )
    dst = f"{db}_cl"[:60]
    mariadb_target.execute(
        f"DROP DATABASE IF EXISTS `{dst}`",
        "CREATE USER IF NOT EXISTS 'hwc'@'%' IDENTIFIED BY '" + SECRET + "'",
        "CREATE USER IF NOT EXISTS 'hwc'@'localhost' IDENTIFIED BY '" + SECRET + "'",
        "GRANT ALL ON *.* TO 'hwc'@'%'",
        "GRANT ALL ON *.* TO 'hwc'@'localhost'",
    )
    workload.run(40)  # captured by the reader before the snapshot
    env = {**driver_env(), "HW_TGT_PW": SECRET}
    service = ReaderService(reader_config)
    service.start()
    try:
        assert service.server is not None
        url = service.server.url
        wait_caught_up(service.tasks["live"], mariadb, timeout=120)
        out = cluster.shared / f"out-{db}"[:80]
        pipeline = (
            f"name: cl\nsource:\n  server: {url}\n  task: live\n"
            "{start}"
            f"checkpoint: {tmp_path / 'ck'}\n"
            # Both workers run on 127.0.0.1: Spark would read another executor's shuffle
            # files from "the same host's" disk, which the isolated workers cannot see.
            "spark: {{conf: {{spark.ui.enabled: 'false',"
            " spark.shuffle.readHostLocalDisk: 'false'}}}}\n"
            f"transforms:\n  - rename_database: {{{{{db}: {dst}}}}}\n"
            "sinks:\n"
            f"  - type: mysql\n    host: {mariadb_target.host}\n    port: {mariadb_target.port}\n"
            "    user: hwc\n    password_env: HW_TGT_PW\n    create_tables: true\n    shards: 2\n"
            f"  - type: postgres\n    host: {postgres['host']}\n"
            f"    port: {postgres.get('port', 5432)}\n"
            f"    user: {postgres['user']}\n    database: {postgres['dbname']}\n"
            "    create_tables: true\n    shards: 2\n"
            f"  - type: parquet_log\n    path: {out}/log\n"
            f"  - type: parquet_mirror\n    path: {out}/mirror\n"
        )
        config = tmp_path / "p.yaml"
        config.write_text(pipeline.format(start=""))
        before = {w: set(w.glob("app-*")) for w in cluster.work_dirs}
        # --mode initial: no stored position, so snapshot, then stream from the record
        # after it in the same application, until SIGTERM.
        with (tmp_path / "stderr").open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "headwater.cli.main", "snapshot", "--mode", "initial",
                 "--config", str(config), "--tables", ",".join(f"{db}.{t}" for t in TABLES),
                 "--source", f"mysql://root@{mariadb.host}:{mariadb.port}",
                 "--chunk-rows", "8", "--master", cluster.master],
                stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
            )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the snapshot's result, once it is done
            assert line, (tmp_path / "stderr").read_text()[-4000:]
            result = orjson.loads(line)
            mariadb.execute(  # DDL after the snapshot: a widened column, a new table
                f"ALTER TABLE `{db}`.orders MODIFY note VARCHAR(200) NULL",
                f"CREATE TABLE `{db}`.ddl_t (id INT PRIMARY KEY, v VARCHAR(10))",
                f"INSERT INTO `{db}`.ddl_t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
                f"UPDATE `{db}`.ddl_t SET v = 'z' WHERE id = 2",
                f"DELETE FROM `{db}`.ddl_t WHERE id = 3",
            )
            workload.run(20)
            wait_synced(proc, tmp_path / "stderr", mariadb, db, mariadb_target, postgres, dst)
            proc.send_signal(signal.SIGTERM)  # stops after the current batch
            returncode = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
    finally:
        service.stop()
    stderr_text = (tmp_path / "stderr").read_text()
    print(stderr_text[-6000:])  # shown when an assertion below fails
    assert returncode == 0, stderr_text[-4000:]
    # The snapshot read the change log over HTTP, in chunks on both workers' executors.
    state = SnapshotState.load(str(tmp_path / "ck" / "snapshot.json"))
    assert state is not None and not state.pending() and state.task_dir is None
    assert (state.server, state.task) == (url, "live")
    assert len(state.done) >= 4 and result["rows"] > 0
    assert result["rows"] == sum(int(d["rows"]) for d in state.done.values())
    assert_synced(mariadb, db, mariadb_target, postgres, dst)
    pg_url = (
        f"postgresql://{postgres['user']}@{postgres['host']}:{postgres.get('port', 5432)}"
        f"/{postgres['dbname']}"
    )
    for target in (f"mysql://hwc@{mariadb_target.host}:{mariadb_target.port}", pg_url):
        verify = subprocess.run(
            [sys.executable, "-m", "headwater.cli.main", "verify", "--source",
             f"mysql://root@{mariadb.host}:{mariadb.port}/{db}", "--target", target,
             "--map", f"{db}={dst}"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "HEADWATER_TARGET_PASSWORD": SECRET},
        )  # fmt: skip
        assert verify.returncode == 0, (target, verify.stdout[-2000:], verify.stderr[-2000:])
    extra = mariadb.query(f"SELECT id, v FROM `{db}`.ddl_t ORDER BY id")
    assert [tuple(r) for r in extra] == [(1, "a"), (2, "z")]
    assert mariadb_target.query(f"SELECT id, v FROM `{dst}`.ddl_t ORDER BY id") == extra
    with psycopg.connect(**postgres) as conn:
        pg_rows = conn.execute(f'SELECT id, v FROM "{dst}".ddl_t ORDER BY id').fetchall()
    assert [tuple(r) for r in pg_rows] == [tuple(r) for r in extra]
    assert_parquet_equals_source(spark, mariadb, db, dst, out)
    # This application's executors (the snapshot's chunks, the stream) ran on both workers.
    for work in cluster.work_dirs:
        assert set(work.glob("app-*")) - before[work], f"no executor of the pipeline on {work}"


def wait_synced(
    proc: subprocess.Popen[str], stderr: Path, source: Any, db: str, target: Any,
    pg: dict[str, Any], dst: str, timeout: float = 240,
) -> None:  # fmt: skip
    """Until both targets hold the source's tables (ddl_t included); fails at once when
    the pipeline exits."""
    import psycopg

    from tests.integration.test_pipeline_e2e import assert_synced

    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, stderr.read_text()[-4000:]
        try:
            assert_synced(source, db, target, pg, dst)
            extra = source.query(f"SELECT id, v FROM `{db}`.ddl_t ORDER BY id")
            assert target.query(f"SELECT id, v FROM `{dst}`.ddl_t ORDER BY id") == extra
            with psycopg.connect(**pg) as conn:
                got = conn.execute(f'SELECT id, v FROM "{dst}".ddl_t ORDER BY id').fetchall()
            assert [tuple(r) for r in got] == [tuple(r) for r in extra]
            return
        except (AssertionError, psycopg.Error, pymysql.MySQLError):
            if time.monotonic() > deadline:
                raise
        time.sleep(1)  # each check reads every table of three servers


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def assert_parquet_equals_source(spark: Any, source: Any, db: str, dst: str, out: Path) -> None:
    """The Parquet mirror, read by Spark and by DuckDB, holds the source's rows; the
    Parquet change log, read by both and replayed in sequence order, ends in them too."""
    import duckdb

    from tests.integration.test_pipeline_e2e import TABLES, _mysql_rows

    for table, (_, key, columns) in TABLES.items():
        expected = _mysql_rows(source, db, table)
        assert expected, table
        n = len(key)
        mirror = f"{out}/mirror/{dst}/{table}"
        by_spark = [
            tuple(_text(v) for v in row)
            for row in spark.read.parquet(mirror)
            .selectExpr(*(f"CAST(`{c}` AS STRING)" for c in columns))
            .collect()
        ]
        by_duckdb = [
            tuple(_text(v) for v in row)
            for row in duckdb.sql(
                f"SELECT {', '.join(f'CAST({c} AS VARCHAR)' for c in columns)} FROM"
                f" read_parquet('{mirror}/*/*.parquet', hive_partitioning = true)"
            ).fetchall()
        ]

        def order(row: tuple[str | None, ...], n: int = n) -> tuple[int, ...]:
            return tuple(int(v or 0) for v in row[:n])

        assert sorted(by_spark, key=order) == expected, f"mirror {table} (Spark)"
        assert sorted(by_duckdb, key=order) == expected, f"mirror {table} (DuckDB)"
        query = (
            "SELECT op, sequence, before, after FROM {src}"
            f" WHERE `database` = '{dst}' AND `table` = '{table}'"
        )
        log_spark = spark.read.parquet(f"{out}/log")
        log_spark.createOrReplaceTempView("hw_log")
        spark_rows = [tuple(r) for r in spark.sql(query.format(src="hw_log")).collect()]
        duck_rows = duckdb.sql(
            query.replace("`", '"').format(src=f"read_parquet('{out}/log/**/*.parquet')")
        ).fetchall()
        assert sorted(spark_rows, key=lambda r: r[1]) == sorted(duck_rows, key=lambda r: r[1])
        assert any(r[0] == "read" for r in spark_rows), f"no snapshot rows of {table} in the log"
        versions = _replay(spark_rows, key)
        want = {tuple(int(v) for v in row[:n]): int(row[-1]) for row in expected}
        assert versions == want, f"change log {table}"


def _replay(rows: list[tuple[Any, ...]], key: tuple[str, ...]) -> dict[tuple[int, ...], int]:
    """Key -> ``version`` after applying (op, sequence, before, after) rows in order."""
    state: dict[tuple[int, ...], int] = {}
    for op, _seq, before, after in sorted(rows, key=lambda r: r[1]):
        old = None if before is None else orjson.loads(before)
        new = None if after is None else orjson.loads(after)
        if old is not None:
            state.pop(tuple(int(old[k]) for k in key), None)
        if op != "delete" and new is not None:
            state[tuple(int(new[k]) for k in key)] = int(new["version"])
    return state
