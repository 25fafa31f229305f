"""Replay: ``headwater replay`` to Parquet against point-in-time recovery with
``mariadb-binlog --stop-position ... | mariadb`` into an empty server.

Starts a sandbox source MariaDB (binlog on, a fresh binlog file for the run) and an empty
target MariaDB, starts a reader task on the source, and commits the workload on
``bench.t`` in large multi-row statements (so building is fast): about N changes (2 000 000;
``--quick`` 200 000) of which inserts ~70 %, value updates ~15 %, primary-key updates ~5 %
(some rows moved twice: chains), deletes ~7 % and reinserts of deleted keys. A marker
transaction follows; the point of both replays is the marker's start coordinate
(``FILE:OFFSET``: the state after the workload, before the marker). Then, in the same run
and on the same binlog:

* ``pitr``: ``mariadb-binlog --stop-position=OFFSET FILE | mariadb`` into the empty target
  (the binlog holds CREATE DATABASE and CREATE TABLE too; emptied again before each
  round, untimed), timed end to end;
* ``decode``: the same log range read with the ``headwater`` Spark source and every
  change row materialized (``noop`` sink): the decode cost any replay pays;
* ``headwater``: :func:`headwater.replay.replay_to_parquet` of ``bench.t`` as of the same
  coordinate (Spark ``local[2]`` started before the clock).

The three run in turn in every round (``--rounds``, medians count), so that all see the
same load on a shared machine; the load is printed per round.

The replay's Parquet (read by DuckDB) and the PITR target are compared with the source
(row count and sums of every column) before a rate counts. Rates are changes (row
events) per second. Last line: ``replay_vs_binlog_pitr=<pitr seconds / replay seconds>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from headwater.config import FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.position import BinlogCoordinate
from headwater.reader.task import ReaderTask
from headwater.replay import replay_to_parquet
from headwater.sandbox import MariadbSandbox, SandboxOptions
from headwater.spark.session import build_session

TABLE = (
    "CREATE TABLE bench.t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64) NULL,"
    " ts BIGINT NOT NULL)"
)
SUMS = "COUNT(*), SUM(id), SUM(a), SUM(LENGTH(b)), SUM(b IS NULL), SUM(ts)"
STEP = 20_000  # rows per statement


def workload(source: MariadbSandbox, changes: int) -> int:
    """Commit about ``changes`` row changes on bench.t; returns the exact count."""
    inserts = int(changes * 0.70)
    done = 0

    def run(sql: str) -> None:
        nonlocal done
        with source.connect("bench") as conn, conn.cursor() as cur:
            done += cur.execute(sql)
            conn.commit()

    for lo in range(1, inserts + 1, STEP):
        hi = min(inserts, lo + STEP - 1)
        run(
            "INSERT INTO t SELECT seq, seq % 1000, CONCAT('row-', seq, '-', MD5(seq)),"
            f" seq * 7 FROM seq_{lo}_to_{hi}"
        )
    # value updates (~15 %), NULL flips included
    for lo in range(1, inserts + 1, STEP * 5):
        hi = lo + STEP * 5 - 1
        run(
            "UPDATE t SET a = a + 1, b = IF(id % 3 = 0, NULL, CONCAT('u', id))"
            f" WHERE id BETWEEN {lo} AND {hi} AND id % 5 IN (1, 2) AND id % 7 <> 0"
        )
    # primary-key updates (~5 %): a move, then a second move of a third of them (chains)
    shift = 10 * inserts
    for lo in range(1, inserts + 1, STEP * 10):
        hi = lo + STEP * 10 - 1
        run(f"UPDATE t SET id = id + {shift} WHERE id BETWEEN {lo} AND {hi} AND id % 20 = 3")
    run(f"UPDATE t SET id = id + {shift}, a = -a WHERE id > {shift} AND id % 60 = 3")
    # deletes (~7 %) and reinserts of some deleted keys
    for lo in range(1, inserts + 1, STEP * 10):
        hi = lo + STEP * 10 - 1
        run(f"DELETE FROM t WHERE id BETWEEN {lo} AND {hi} AND id % 14 = 0")
    run(f"INSERT INTO t SELECT seq, 7, 'again', 0 FROM seq_1_to_{inserts} WHERE seq % 42 = 0")
    return done


def wait(predicate: Any, timeout: float, what: str, period: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(period)


def caught_up(task: ReaderTask, gtid_pos: str) -> bool:
    if task.state == "failed":
        raise SystemExit(f"reader failed: {task.error}")
    return task.gtid_set is not None and str(task.gtid_set) == gtid_pos


def pitr(source: MariadbSandbox, target: MariadbSandbox, file: str, stop: int) -> float:
    """``mariadb-binlog --stop-position`` of the run's binlog piped into the target."""
    t0 = time.perf_counter()
    dump = subprocess.Popen(
        ["mariadb-binlog", f"--stop-position={stop}", str(source.binlog_path(file))],
        stdout=subprocess.PIPE,
    )
    load = subprocess.run(
        ["mariadb", "-h", target.host, "-P", str(target.port), "-u", "root"],
        stdin=dump.stdout,
        check=False,
    )
    assert dump.stdout is not None
    dump.stdout.close()
    if dump.wait() != 0 or load.returncode != 0:
        raise SystemExit("mariadb-binlog | mariadb failed")
    return time.perf_counter() - t0


def parquet_sums(path: Path) -> tuple[Any, ...]:
    import duckdb

    con = duckdb.connect()
    try:
        row = con.execute(f"SELECT {SUMS} FROM read_parquet('{path}/*.parquet')").fetchone()
    finally:
        con.close()
    assert row is not None
    return tuple(int(v or 0) for v in row)


def server_sums(server: MariadbSandbox) -> tuple[Any, ...]:
    return tuple(int(v or 0) for v in server.query(f"SELECT {SUMS} FROM bench.t")[0])


def decode_only(spark: Any, task: Path, as_of: str) -> None:
    """The log range read by the ``headwater`` source, every change row materialized."""
    (
        spark.read.format("headwater")
        .options(path=str(task), tables="bench.t", endingPosition=as_of)
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--changes", type=int, default=None)
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (medians count)")
    ap.add_argument("--no-cli", action="store_true", help="skip the cold command's run")
    ap.add_argument(
        "--warmup", type=int, default=20, help="small untimed runs of the decode and the replay"
    )
    args = ap.parse_args()
    target_changes = args.changes or (200_000 if args.quick else 2_000_000)

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-replay-"))
    source = MariadbSandbox(SandboxOptions()).start()
    target = MariadbSandbox(SandboxOptions(server_id=2, log_bin=False)).start()
    task = None
    thread: threading.Thread | None = None
    ratio = 0.0
    try:
        source.execute("FLUSH BINARY LOGS")
        file, begin = source.binlog_position()
        config = SourceConfig(
            name="bench",
            hosts=(HostConfig(source.host, source.port),),
            user="root",
            server_id=4244,
            start=StartConfig("file", coordinate=BinlogCoordinate(file, begin)),
            filters=FilterConfig(include=(r"bench\..*",)),
            state_interval=0.05,
            heartbeat_period=0.5,
        )
        task = ReaderTask(config, tmp / "task")
        thread = threading.Thread(target=task.run, daemon=True)
        thread.start()
        source.execute("CREATE DATABASE bench", TABLE, "CREATE TABLE bench.marker (id INT)")
        t0 = time.perf_counter()
        changes = workload(source, target_changes)
        build_s = time.perf_counter() - t0
        stop_file, stop = source.binlog_position()
        if stop_file != file:
            raise SystemExit(f"the workload left {file}; raise max_binlog_size")
        expected = server_sums(source)
        source.execute("INSERT INTO bench.marker VALUES (1)")
        gtid = str(source.query("SELECT @@gtid_binlog_pos")[0][0])
        wait(lambda: caught_up(task, gtid), 600, "the reader")
        print(
            f"workload: {changes:,} changes in {build_s:.1f} s (reader caught up after "
            f"{time.perf_counter() - t0:.1f} s); {expected[0]:,} rows at {file}:{stop}",
            file=sys.stderr,
        )

        task.request_stop()  # the reader is done: nothing of it runs during the clocks
        thread.join(10)
        as_of = f"{file}:{stop}"
        out = tmp / "replayed"
        cli_s = None
        if not args.no_cli:
            # The command from a cold start (its own JVM), as a user runs it.
            command = str(Path(sys.executable).with_name("headwater"))
            t0 = time.perf_counter()
            subprocess.run(
                [command, "replay", "--log", str(tmp / "task"),
                 "--tables", "bench.t", "--as-of", as_of, "--output", str(tmp / "cli")],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            cli_s = time.perf_counter() - t0
            assert parquet_sums(tmp / "cli" / "bench.t") == expected

        spark = build_session("local[2]", "headwater-bench-replay")
        spark.sparkContext.setLogLevel("ERROR")
        from headwater.spark import register

        register(spark)
        # Before the clocks: the JVM, the session and the Python workers (their imports,
        # the decoders' code per table shape) are up, for both the decode and the replay:
        # --warmup small untimed runs of each in turn (the first records of the log). They
        # stand for a session's earlier jobs: the JIT compiles Spark's job machinery over
        # tens of jobs (a replay's JVM CPU fell from 0.10-0.15 to 0.03-0.05 s over 45
        # small ones), as bench/kafka.py's --warmup-batches for a pipeline.
        small = "seq:6"  # the CREATEs and the first INSERTs
        for _ in range(max(1, args.warmup)):
            decode_only(spark, tmp / "task", small)
            # partitions=2: both Python workers of local[2] (the replay's parts) are warm
            replay_to_parquet(
                spark, tmp / "task", ["bench.t"], tmp / "warm", as_of=small, partitions=2
            )

        pitr_runs: list[float] = []
        decode_runs: list[float] = []
        replay_runs: list[float] = []
        for _ in range(args.rounds):  # alternating, so all three see the same load
            load = os.getloadavg()[0]
            target.execute("DROP DATABASE IF EXISTS bench")  # empty again, untimed
            pitr_runs.append(pitr(source, target, file, stop))
            assert server_sums(target) == expected, ("pitr target differs", server_sums(target))
            t0 = time.perf_counter()
            decode_only(spark, tmp / "task", as_of)
            decode_runs.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = replay_to_parquet(
                spark, tmp / "task", ["bench.t"], out, as_of=as_of, partitions=args.partitions
            )
            replay_runs.append(time.perf_counter() - t0)
            got = parquet_sums(out / "bench.t")
            assert got == expected, ("replay differs", got, expected)
            assert result.tables[0].rows == expected[0]
            print(
                f"  round: pitr {pitr_runs[-1]:.2f} s, decode {decode_runs[-1]:.2f} s, "
                f"replay {replay_runs[-1]:.2f} s (load {load:.1f} -> {os.getloadavg()[0]:.1f})"
            )
        pitr_s = statistics.median(pitr_runs)
        print(f"binlog pitr: {pitr_s:.2f} s, {changes / pitr_s:,.0f} changes/s")
        decode_s = statistics.median(decode_runs)
        replay_s = statistics.median(replay_runs)
        print(f"decode only: {decode_s:.2f} s, {changes / decode_s:,.0f} changes/s")
        print(
            f"headwater replay: {replay_s:.2f} s, {changes / replay_s:,.0f} changes/s "
            f"({replay_s / decode_s:.2f}x the decode)"
        )
        if cli_s is not None:
            print(
                f"headwater replay command (cold: JVM start included): {cli_s:.2f} s, "
                f"{changes / cli_s:,.0f} changes/s, {pitr_s / cli_s:.2f}x the pitr"
            )
        spark.stop()
        ratio = pitr_s / replay_s
    finally:
        if task is not None:
            task.request_stop()
        if thread is not None:
            thread.join(10)
        source.stop()
        target.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # the log and the Parquet (GBs at 2M)
    print(f"replay_vs_binlog_pitr={ratio:.2f}")


if __name__ == "__main__":
    main()
