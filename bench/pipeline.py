"""Pipeline: source commit to target apply, headwater against a naive replicator.

Starts a sandbox source MariaDB (binlog on) and a target MariaDB. Then, in the same run:

* throughput: both contenders replicate the same pre-filled binlog, a workload of N row
  changes (multi-row INSERT transactions, then UPDATEs and DELETEs) committed on the
  source while neither was reading it, and each is timed from its start to the moment
  its target equals the source:

  - ``naive``: python-mysql-replication's ``BinLogStreamReader`` over the binlog,
    applying each row with one statement (INSERT / UPDATE / DELETE by primary key,
    autocommit) through PyMySQL -- what a small hand-written replicator does;
  - ``headwater``: a pipeline is a long-running service, so it runs as one: the reader
    task (in a process of its own, as ``headwater reader run`` is in production:
    ``bench/readerproc.py``; until 2026-11-24 a thread of this process, sharing the
    driver's GIL) and the streaming query (``headwater pipeline``: Spark, MySQL sink, 2
    shards, target database ``bench_hw``) are started first and warmed (``WARM_ROUNDS`` rounds
    of about 75 000 changes to another table go through the same path, so that the
    JVM's JIT compiler has compiled the hot code, as in a service that has been
    running), then the reader is stopped while the workload is committed. The clock
    starts when the reader restarts (it resumes from its stored position: the whole
    workload is behind it) and stops when the query has applied the last record the
    reader stored. ``--rounds`` rounds (default 3): the first replicates the naive
    replicator's binlog, the others the same workload on tables of their own
    (``t2``, ``t3``, ...), each committed while the reader is stopped again; the median
    rate counts (a round swings by a micro-batch, ~0.3-0.5 s, with whether the first
    trigger sees the first transaction alone). With the reader in its own process
    (2026-11-25) it stores the 800 000 changes in 0.2-0.5 s (0.10-0.16 CPU-s), and most
    rounds are one batch of all of them; at load 4-9 the rounds took 2.3-7.4 s
    (docs/operations.md, "Large catch-ups (the net path)", has the session's runs).

  Every target table is compared with its source (row count and checksum) before a
  rate counts.
* latency: with the same running pipeline, a steady ``--rate`` rows/s (default 1000) of
  single-row-batch commits for ``--seconds``, each row carrying its id; the commit time
  is taken when COMMIT returns; a poller reads the target every 20 ms and records when
  each id becomes visible; prints p50 and p99 of visible - committed.

* MariaDB's own replication (what a user would pick for MariaDB to MariaDB): a replica
  sandbox (no binlog, like the target) with the tables created empty, ``CHANGE MASTER TO
  ... master_use_gtid=slave_pos``; for each apply mode (serial; optimistic parallel with
  2 and 4 threads: ``slave_parallel_threads``, ``slave_parallel_mode=optimistic``) the
  table is emptied, ``gtid_slave_pos`` set to the source's ``gtid_binlog_pos`` from
  before the workload (the replica was stopped while it was committed), and the clock
  runs from ``START SLAVE`` until the replica's ``gtid_slave_pos`` equals the source's
  ``gtid_binlog_pos`` after it (the IO thread's download included); ``CHECKSUM TABLE``
  must match the source's. For the batched workload (same binlog range as the others) and
  for a single-row-transaction workload (``--single`` INSERTs then half as many UPDATEs
  of table ``s``, one commit each), which headwater then replicates as one more round.
  The single-row workload runs ``--single-rounds`` times (default 3), each on a table of
  its own (``s``, ``s2``, ...) committed while the reader is stopped, each replicated by
  MariaDB (every mode) and by headwater; each side's median counts.

The target server runs with MariaDB's durable default, ``innodb_flush_log_at_trx_commit=1``,
as a production target does (``--relaxed-target``: ``2``, the test fixtures' setting, under
which a commit does not wait for the disk). One commit per row is what a naive replicator
pays for; headwater commits once per shard per micro-batch. Both numbers are in the README.

The replica runs with the same setting (``sync_binlog`` does not apply: neither target
nor replica writes a binlog, as the issue's setup has it).

* PostgreSQL: a second pipeline (postgres sink, ``tables: [bench.t]``, from the
  workload's first GTID) replicates the batched workload into PostgreSQL
  (``HEADWATER_TEST_POSTGRES``, default ``host=127.0.0.1 port=5432 user=postgres``;
  database ``hw_bench_pipeline``) with ``trigger(availableNow)``; its rows/s count the
  time of its micro-batches (the query's start is a service's one-time cost). The limit
  is PostgreSQL's own ``COPY`` (CSV text built beforehand) of the final rows.

Printed: each applier's rows/s; ``pipeline_speedup_vs_naive=<headwater median rows/s /
naive rows/s>``; ``pipeline_pg_vs_copy=<headwater into PostgreSQL rows/s / COPY rows/s>``;
``pipeline_vs_native_replication_single=<headwater / MariaDB serial
apply, single-row transactions>``. Last line: ``pipeline_vs_native_replication=<headwater
median rows/s / MariaDB serial apply rows/s, batched>``.
Rows (``--full``, the default): 500 000 (800 000 changes) and 10 000 single-row INSERTs;
``--quick``: 20 000 rows, 2 000 single-row INSERTs and 8 s of latency (a few minutes with
a durable target, most of it the naive replicator). Each headwater round also prints the
CPU seconds of the Spark JVM (its own threads), of its Python workers per change and of
the reader process (from /proc: less swayed by the machine's load than the round's wall
time). ``--no-naive`` leaves the naive replicator out (about 5 minutes of a full run);
``--batched-only`` runs the batched workload only (MariaDB's replication and headwater's
rounds: paired runs of the target figure in about 2 minutes); ``--spark-conf key=value``
adds to the pipeline's ``spark.conf`` (``headwater.jvm.c1Only=true``: the JVM without C2,
``headwater.spark.session``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from headwater.config import FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.direct import offset_at
from headwater.pipeline.runner import PipelineRunner
from headwater.position import BinlogCoordinate
from headwater.sandbox import MariadbSandbox, SandboxOptions
from headwater.spark.logaccess import open_log
from headwater.spark.offsets import parse_options

sys.path.insert(0, str(Path(__file__).parent))
from proccpu import own_cpu
from readerproc import Reader

TABLE = (
    "CREATE TABLE IF NOT EXISTS {db}.{table} (id INT PRIMARY KEY, a INT NOT NULL,"
    " b VARCHAR(64) NULL, c DECIMAL(10,2) NULL, ts BIGINT NOT NULL)"
)


#: Warm-up rounds, each on WARM_ROWS rows of another table: delete the previous round's
#: rows, insert, update all, delete half (about 75 000 changes a round). The JIT
#: compiler's CPU of each round is printed: it does not settle with more rounds (15
#: rounds, 2026-11-24: 0.06-0.53 CPU-s in each of rounds 3-15, most 0.2-0.45, as in the
#: timed rounds),
#: so it is a cost of every micro-batch of a running service, not a cold JVM's.
WARM_ROUNDS = 3
WARM_ROWS = 30_000


def checksum(server: MariadbSandbox, db: str, table: str = "t") -> tuple[int, int]:
    rows = server.query(
        f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', id, a, COALESCE(b, '-'),"
        f" COALESCE(c, '-')))), 0) FROM {db}.{table}"
    )
    return int(rows[0][0]), int(rows[0][1])


def workload(source: MariadbSandbox, rows: int, table: str = "t") -> int:
    """Inserts ``rows`` rows (1000 per transaction), updates half, deletes a tenth.
    Returns the number of row changes."""
    conn = source.connect("bench")
    changes = 0
    with conn.cursor() as cur:
        for first in range(0, rows, 1000):
            n = min(1000, rows - first)
            cur.execute(
                f"INSERT INTO {table} SELECT seq, seq * 3, MD5(seq), seq / 7, 0"
                f" FROM seq_{first + 1}_to_{first + n}"
            )
            conn.commit()
            changes += n
        for first in range(0, rows, 2000):
            cur.execute(
                f"UPDATE {table} SET a = a + 1, b = NULL"
                f" WHERE id BETWEEN {first + 1} AND {first + 1000}"
            )
            conn.commit()
            changes += cur.rowcount
        cur.execute(f"DELETE FROM {table} WHERE id % 10 = 0")
        conn.commit()
        changes += cur.rowcount
    conn.close()
    return changes


def single_workload(source: MariadbSandbox, rows: int, table: str = "s") -> int:
    """``rows`` one-row INSERT transactions, then UPDATEs of the first half, one commit
    each. Returns the number of row changes."""
    conn = source.connect("bench")
    conn.autocommit(True)
    with conn.cursor() as cur:
        for i in range(1, rows + 1):
            cur.execute(f"INSERT INTO {table} VALUES ({i}, {i * 3}, MD5({i}), {i} / 7, 0)")
        for i in range(1, rows // 2 + 1):
            cur.execute(f"UPDATE {table} SET a = a + 1, b = NULL WHERE id = {i}")
    conn.close()
    return rows + rows // 2


# --- MariaDB's own replication ------------------------------------------------------------

#: (label, slave_parallel_threads): 0 is the serial SQL thread.
NATIVE_MODES = (("serial", 0), ("optimistic 2 threads", 2), ("optimistic 4 threads", 4))


def table_checksum(server: MariadbSandbox, table: str) -> int:
    return int(server.query(f"CHECKSUM TABLE bench.{table}")[0][1])


def setup_replica(replica: MariadbSandbox, source: MariadbSandbox) -> None:
    replica.execute(
        f"CHANGE MASTER TO master_host = '{source.host}', master_port = {source.port},"
        " master_user = 'root', master_password = '', master_use_gtid = slave_pos"
    )


def native(
    source: MariadbSandbox, replica: MariadbSandbox, table: str, span: tuple[str, str], changes: int
) -> dict[str, float]:
    """rows/s of MariaDB's replication applying the binlog from GTID ``span[0]`` to
    ``span[1]`` (the workload on ``table``), in each of NATIVE_MODES."""
    want = table_checksum(source, table)
    conn = replica.connect()
    conn.autocommit(True)
    rates: dict[str, float] = {}
    try:
        with conn.cursor() as cur:
            for label, threads in NATIVE_MODES:
                replica.execute(
                    "STOP SLAVE", "RESET SLAVE", f"TRUNCATE TABLE bench.{table}",
                    f"SET GLOBAL gtid_slave_pos = '{span[0]}'",
                    f"SET GLOBAL slave_parallel_threads = {threads}",
                    "SET GLOBAL slave_parallel_mode = 'optimistic'",
                )  # fmt: skip
                t0 = time.perf_counter()
                cur.execute("START SLAVE")
                checked = t0
                while True:
                    cur.execute("SELECT @@GLOBAL.gtid_slave_pos")
                    if cur.fetchone()[0] == span[1]:
                        break
                    now = time.perf_counter()
                    if now - checked > 1:  # a stopped SQL thread would wait forever
                        checked = now
                        cur.execute("SHOW SLAVE STATUS")
                        names = [d[0] for d in cur.description]
                        status = dict(zip(names, cur.fetchone(), strict=True))
                        if status["Slave_SQL_Running"] != "Yes" or now - t0 > 900:
                            raise SystemExit(f"replica: {status['Last_SQL_Error'] or status}")
                    time.sleep(0.005)
                elapsed = time.perf_counter() - t0
                cur.execute("STOP SLAVE")
                if table_checksum(replica, table) != want:
                    raise SystemExit(f"replica ({label}): CHECKSUM TABLE {table} differs")
                rates[label] = changes / elapsed
                print(f"MariaDB replication, {label}: {elapsed:.2f} s, {rates[label]:,.0f} rows/s")
    finally:
        conn.close()
    return rates


# --- PostgreSQL ---------------------------------------------------------------------------

PG_DSN = os.environ.get("HEADWATER_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres")
PG_DB = "hw_bench_pipeline"


def pg_connect(dbname: str) -> Any:
    import psycopg

    return psycopg.connect(f"{PG_DSN} dbname={dbname}", autocommit=True)


def pg_fresh_database() -> dict[str, str]:
    admin = pg_connect("postgres")
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{PG_DB}"')
    finally:
        admin.close()
    return dict(p.split("=", 1) for p in PG_DSN.split())


def pg_pipeline(task_dir: Path, checkpoint: Path, gtid_before: str) -> float:
    """Seconds of the micro-batches that bring the batched workload (table ``t``, from the
    first record after ``gtid_before``) into PostgreSQL (a trigger(availableNow) run of a
    second pipeline; its query start, a one-time cost, is left out: the sum of its
    batches' ``triggerExecution``)."""
    pg = pg_fresh_database()
    yaml = (
        "name: bench_pg\n"
        f"source: {{path: {task_dir}, tables: [bench.t], partitions: 2,"
        f" starting_position: 'gtid:{gtid_before}',"
        " options: {maxBytesPerTrigger: '67108864'}}\n"
        f"checkpoint: {checkpoint}\n"
        "sinks:\n"
        f"  - {{type: postgres, host: {pg['host']}, port: {pg.get('port', 5432)},"
        f" user: {pg['user']}, database: {PG_DB}, create_tables: true, shards: 2,"
        " batch_rows: 5000}\n"
    )
    runner = PipelineRunner(parse_pipeline_config(yaml, file="bench_pg.yaml"))
    t0 = time.perf_counter()
    runner.run(available_now=True, progress=sys.stderr)
    wall = time.perf_counter() - t0
    assert runner.query is not None
    # Batches that moved the offsets (a batch applied in the driver or by the net path
    # reads nothing through Spark: its numInputRows is 0).
    batches = [
        p
        for p in runner.query.recentProgress
        if p["sources"] and p["sources"][0]["startOffset"] != p["sources"][0]["endOffset"]
    ]
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in batches) / 1000
    print(f"headwater into PostgreSQL: {len(batches)} batches, {busy:.2f} s ({wall:.2f} s wall)")
    return busy


def pg_rows_equal(source: MariadbSandbox) -> bool:
    sql = "SELECT COUNT(*), SUM(id), SUM(a), COUNT(b), SUM(c) FROM {}"
    want = source.query(sql.format("bench.t"))[0]
    conn = pg_connect(PG_DB)
    try:
        got = conn.execute(sql.format("bench.t")).fetchone()
    finally:
        conn.close()
    return [int(x or 0) for x in got] == [int(x or 0) for x in want]


def pg_copy(source: MariadbSandbox) -> tuple[int, float]:
    """``(rows, seconds)`` of PostgreSQL's own ``COPY`` loading the final rows of
    ``bench.t`` (as CSV text built beforehand) into a table of the same shape, committed."""
    rows = source.query("SELECT id, a, b, c, ts FROM bench.t")
    text = "".join(
        f"{i},{a},{'' if b is None else b},{'' if c is None else c},{ts}\n"
        for i, a, b, c, ts in rows
    ).encode()
    conn = pg_connect(PG_DB)
    try:
        conn.execute(
            "CREATE TABLE copy_t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64),"
            " c NUMERIC(10,2), ts BIGINT NOT NULL)"
        )
        conn.autocommit = False
        t0 = time.perf_counter()
        with conn.cursor() as cur, cur.copy("COPY copy_t FROM STDIN (FORMAT csv)") as copy:
            copy.write(text)
        conn.commit()
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    return len(rows), elapsed


# --- the naive replicator -----------------------------------------------------------------


def naive(source: MariadbSandbox, target: MariadbSandbox, start: tuple[str, int]) -> float:
    """Seconds for python-mysql-replication + one statement per row to apply the log."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    conn = target.connect("bench_naive")
    conn.autocommit(True)
    stream = BinLogStreamReader(
        connection_settings={"host": source.host, "port": source.port, "user": "root",
                             "passwd": ""},
        server_id=9901,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=["bench"],
    )  # fmt: skip
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        for event in stream:
            for row in event.rows:
                if isinstance(event, WriteRowsEvent):
                    v = row["values"]
                    cur.execute(
                        "INSERT INTO t (id, a, b, c, ts) VALUES (%s, %s, %s, %s, %s)",
                        (v["id"], v["a"], v["b"], v["c"], v["ts"]),
                    )
                elif isinstance(event, UpdateRowsEvent):
                    v, k = row["after_values"], row["before_values"]["id"]
                    cur.execute(
                        "UPDATE t SET id=%s, a=%s, b=%s, c=%s, ts=%s WHERE id=%s",
                        (v["id"], v["a"], v["b"], v["c"], v["ts"], k),
                    )
                else:
                    cur.execute("DELETE FROM t WHERE id=%s", (row["values"]["id"],))
    elapsed = time.perf_counter() - t0
    stream.close()
    conn.close()
    return elapsed


# --- headwater ----------------------------------------------------------------------------


def pipeline_yaml(
    task_dir: Path,
    target: MariadbSandbox,
    checkpoint: Path,
    net_apply: bool = True,
    spark_conf: dict[str, str] | None = None,
) -> str:
    net = "" if net_apply else ", netApply: 'false'"
    conf = ", ".join(f"{k}: '{v}'" for k, v in (spark_conf or {}).items())
    spark = f"spark: {{conf: {{{conf}}}}}\n" if conf else ""
    return (
        f"name: bench\n{spark}"
        # A byte limit plans batches from record headers; a row limit would decode every
        # record on the driver to count rows. Two input partitions: two cores.
        f"source: {{path: {task_dir}, partitions: 2,"
        f" options: {{maxBytesPerTrigger: '67108864'{net}}}}}\n"
        f"checkpoint: {checkpoint}\n"
        "transforms:\n  - rename_database: {bench: bench_hw}\n"
        "sinks:\n"
        f"  - {{type: mysql, host: {target.host}, port: {target.port}, user: root,"
        " create_tables: true, ddl: skip, shards: 2, batch_rows: 5000}\n"
    )


def warm_applied(target: MariadbSandbox, want: Any) -> bool:
    """The target's warm-up table exists and has ``want`` (count, sum)."""
    exists = target.query(
        "SELECT COUNT(*) FROM information_schema.tables"
        " WHERE table_schema = 'bench_hw' AND table_name = 'warm'"
    )[0][0]
    return bool(exists) and target.query("SELECT COUNT(*), SUM(v) FROM bench_hw.warm")[0] == want


def wait(predicate: Any, timeout: float, what: str, period: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(period)


def latency(
    source: MariadbSandbox, target: MariadbSandbox, rate: int, seconds: float, first_id: int
) -> list[float]:
    """Commit-to-visible latencies (seconds) of ``rate`` rows/s for ``seconds``."""
    committed: dict[int, float] = {}
    visible: dict[int, float] = {}
    stop = threading.Event()

    def poll() -> None:
        conn = target.connect("bench_hw")
        conn.autocommit(True)
        # Shards commit independently, so ids become visible out of order: poll above the
        # highest id below which every id has been seen, not above the highest seen.
        low = first_id
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("SELECT id FROM t WHERE id > %s", (low,))
                now = time.time()
                for (i,) in cur.fetchall():
                    visible.setdefault(i, now)
                while low + 1 in visible:
                    low += 1
                time.sleep(0.02)  # the polling period of the measurement
        conn.close()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    conn = source.connect("bench")
    per_tick = max(1, rate // 50)
    next_id = first_id + 1
    t0 = time.monotonic()
    with conn.cursor() as cur:
        while time.monotonic() - t0 < seconds:
            ids = range(next_id, next_id + per_tick)
            cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 0, NULL, NULL, 0)" for i in ids))
            conn.commit()
            now = time.time()
            committed.update(dict.fromkeys(ids, now))
            next_id += per_tick
            time.sleep(max(0.0, t0 + (next_id - first_id) / rate - time.monotonic()))
    conn.close()
    deadline = time.monotonic() + 60
    while len(visible) < len(committed) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    poller.join(5)
    missing = len(committed) - sum(1 for i in committed if i in visible)
    print(
        f"latency: {len(committed)} rows committed in {seconds:.0f} s"
        f" ({len(committed) / seconds:,.0f} rows/s achieved), {missing} never visible",
        file=sys.stderr,
    )
    return sorted(visible[i] - committed[i] for i in committed if i in visible)


def _procs() -> dict[int, tuple[int, str, float, float]]:
    """``pid -> (ppid, comm, own CPU s, reaped children's CPU s)`` from /proc (proc(5):
    ``stat`` fields 14-17, utime stime cutime cstime, in clock ticks)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                text = f.read().decode()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        out[int(entry)] = (int(fields[1]), comm, (utime + stime) / tick, (cutime + cstime) / tick)
    return out


def jit_cpu() -> float:
    """CPU seconds so far of the live JIT compiler threads of this process's Spark JVM
    (``C1 CompilerThread*``, ``C2 CompilerThread*``; a dynamic one that exited is not
    counted, so this is a lower bound of a span's compilation)."""
    procs = _procs()
    me = os.getpid()
    jvms = [pid for pid, (ppid, comm, _o, _c) in procs.items() if ppid == me and comm == "java"]
    if not jvms:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for task in os.listdir(f"/proc/{jvms[0]}/task"):
        try:
            with open(f"/proc/{jvms[0]}/task/{task}/stat", "rb") as f:
                text = f.read().decode()
        except OSError:
            continue
        if text[text.index("(") + 1 : text.rindex(")")].startswith(("C1 Compiler", "C2 Compiler")):
            fields = text[text.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def spark_cpu() -> tuple[float, float]:
    """CPU seconds so far of this process's Spark JVM (its own threads) and of its Python
    workers (every process below the JVM, with the children they reaped)."""
    procs = _procs()
    me = os.getpid()
    jvms = [pid for pid, (ppid, comm, _o, _c) in procs.items() if ppid == me and comm == "java"]
    if not jvms:
        return 0.0, 0.0
    jvm = jvms[0]
    below, frontier = set(), [jvm]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, (ppid, *_rest) in procs.items() if ppid == parent]
        below.update(kids)
        frontier += kids
    workers = procs[jvm][3] + sum(procs[p][2] + procs[p][3] for p in below)
    return procs[jvm][2], workers


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def stored_through(log: Any, gtid_pos: str) -> int | None:
    """The log's end seq once its last acknowledged record is the transaction of
    ``gtid_pos`` (the source's one-domain ``@@gtid_binlog_pos``), else None."""
    end = log.end()[0]
    if end <= 1:  # (seqs start at 1: an empty log's end is 1, and it holds no seq 0)
        return None
    last = next(iter(log.records(end - 1, end)), None)
    return end if last is not None and last.gtid == gtid_pos else None


def applied_all(runner: PipelineRunner, end_seq: int) -> bool:
    """The pipeline's ``foreachBatch`` has returned (every sink committed) for a batch
    whose end (Spark's offset log, written before the batch runs) reaches ``end_seq`` (the
    log's end once the reader stored the source's last transaction). Read in Python, as
    bench/kafka.py does: until 2026-11-25 this polled the query's ``lastProgress`` every
    20 ms, a Py4J call whose report the JVM builds as JSON (0.1-0.3 CPU-s of the JVM a
    round, measured by bench/kafka.py), counted in the round. Spark's commit log and
    progress report after the batch are not apply time."""
    end = offset_at(runner.config.checkpoint, runner.writer.last_committed)
    return end is not None and end.seq >= end_seq


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true", help="the default sizes (500 000 rows)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--single", type=int, default=None, help="single-row INSERTs")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--rounds", type=int, default=3, help="headwater rounds (median counts)")
    ap.add_argument(
        "--single-rounds",
        type=int,
        default=3,
        help="rounds of the single-row workload, each on a table of its own, for MariaDB's"
        " replication and headwater alike (the medians count)",
    )
    ap.add_argument(
        "--relaxed-target",
        action="store_true",
        help="target with innodb_flush_log_at_trx_commit=2 (the test fixtures' setting)"
        " instead of the server's durable default (1)",
    )
    ap.add_argument(
        "--no-net-apply",
        action="store_true",
        help="netApply: 'false' (large batches through the Spark job, not the net-effect apply)",
    )
    ap.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        help="key=value, the pipeline's spark.conf (headwater.jvm.c1Only=true: C2 off)",
    )
    ap.add_argument(
        "--no-naive", action="store_true", help="leave the naive replicator out (~5 min a full run)"
    )
    ap.add_argument(
        "--batched-only",
        action="store_true",
        help="only the batched workload (MariaDB's replication and headwater): no naive"
        " replicator, PostgreSQL, single-row rounds or latency (for paired runs)",
    )
    args = ap.parse_args()
    rows = args.rows or (20_000 if args.quick else 500_000)
    single = args.single or (2_000 if args.quick else 10_000)
    seconds = args.seconds or (8.0 if args.quick else 30.0)

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-pipeline-"))
    source = MariadbSandbox(SandboxOptions()).start()
    durability = () if args.relaxed_target else ("--innodb-flush-log-at-trx-commit=1",)
    target = MariadbSandbox(SandboxOptions(server_id=2, log_bin=False, extra=durability)).start()
    replica = MariadbSandbox(SandboxOptions(server_id=3, log_bin=False, extra=durability)).start()
    print(
        "target, replica: innodb_flush_log_at_trx_commit="
        + str(target.query("SELECT @@innodb_flush_log_at_trx_commit")[0][0])
        + ", "
        + str(replica.query("SELECT @@innodb_flush_log_at_trx_commit")[0][0])
        + f"; load average {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
    )
    reader: Reader | None = None
    stop = threading.Event()
    running: threading.Thread | None = None
    try:
        # The tables of every round exist before the pipeline starts: a DDL record in a
        # timed round would cost it a micro-batch of its own.
        singles = ["s", *(f"s{n}" for n in range(2, args.single_rounds + 1))]
        tables = ["t", *(f"t{n}" for n in range(2, args.rounds + 1)), *singles]
        source.execute(
            "CREATE DATABASE bench", *(TABLE.format(db="bench", table=t) for t in tables),
            "CREATE TABLE bench.warm (id INT PRIMARY KEY, v INT)",
        )  # fmt: skip
        target.execute(
            "CREATE DATABASE bench_naive", "CREATE DATABASE bench_hw",
            TABLE.format(db="bench_naive", table="t"),
            *(TABLE.format(db="bench_hw", table=t) for t in tables),
        )  # fmt: skip
        replica.execute(
            "CREATE DATABASE bench", *(TABLE.format(db="bench", table=t) for t in ("t", *singles))
        )
        setup_replica(replica, source)
        start = source.binlog_position()
        config = SourceConfig(
            name="bench",
            hosts=(HostConfig(source.host, source.port),),
            user="root",
            server_id=4242,
            start=StartConfig("file", coordinate=BinlogCoordinate(*start)),
            filters=FilterConfig(include=(r"bench\..*",)),
        )  # the default state_interval (1 s): a round's end is read from the log

        # The running service: reader and streaming query, warmed on bench.warm.
        reader = Reader(config, tmp / "task", tmp)
        reader.start()
        wait(lambda: (tmp / "task" / "changes").is_dir(), 60, "the reader's log")
        pipeline = parse_pipeline_config(
            pipeline_yaml(
                tmp / "task",
                target,
                tmp / "checkpoint",
                not args.no_net_apply,
                dict(c.split("=", 1) for c in args.spark_conf),
            ),
            file="bench.yaml",
        )
        runner = PipelineRunner(pipeline)
        runner.spark.sparkContext.setLogLevel("ERROR")
        running = threading.Thread(target=lambda: runner.run(stop=stop, progress=sys.stderr))
        running.start()
        # Warm-up: changes through the same path (decode, shuffle, apply) until the JVM
        # has compiled its hot code, as in a service that has been running for a while.
        # A cold JVM spends seconds of CPU in its JIT compiler threads during the first
        # large batches (measured: 2.3 CPU-s of a 4 s run on two cores).
        jit: list[float] = []
        for _ in range(WARM_ROUNDS):
            jit0 = jit_cpu()
            source.execute(
                "DELETE FROM bench.warm",
                *(f"INSERT INTO bench.warm SELECT seq, seq FROM seq_{i + 1}_to_{i + 5000}"
                  for i in range(0, WARM_ROWS, 5000)),
                "UPDATE bench.warm SET v = v + 1",
                "DELETE FROM bench.warm WHERE id % 2 = 0",
                database="bench",
            )  # fmt: skip
            want = source.query("SELECT COUNT(*), SUM(v) FROM bench.warm")[0]
            wait(partial(warm_applied, target, want), 300, "the warm-up rows", period=0.1)
            jit.append(jit_cpu() - jit0)
        print(
            f"warm-up: {len(jit)} rounds, JIT compiler CPU-s per round "
            + " ".join(f"{x:.2f}" for x in jit),
            file=sys.stderr,
        )
        query = runner.query
        assert query is not None

        def stop_reader() -> None:
            """Stop the running reader task (it closes its log) and start the next, waiting
            process."""
            assert reader is not None
            reader.stop()

        stop_reader()

        # The workload, committed while nobody reads the binlog.
        workload_start = source.binlog_position()
        gtid_before = str(source.query("SELECT @@gtid_binlog_pos")[0][0])
        changes = workload(source, rows)
        expected = checksum(source, "bench")
        source_gtid = str(source.query("SELECT @@gtid_binlog_pos")[0][0])
        print(f"workload: {changes} row changes, {expected[0]} rows left", file=sys.stderr)

        native_rates = native(source, replica, "t", (gtid_before, source_gtid), changes)

        naive_rate: float | None = None
        if not (args.no_naive or args.batched_only):
            naive_s = naive(source, target, workload_start)
            assert checksum(target, "bench_naive") == expected, "naive target differs"
            naive_rate = changes / naive_s
            print(f"naive: {naive_s:.2f} s, {naive_rate:,.0f} rows/s")

        def timed(table: str, changes: int, expected: tuple[int, int], gtid: str) -> float:
            """Seconds from the reader's restart to the query's applying all of it."""
            assert reader is not None
            log = open_log(parse_options({"path": str(tmp / "task")}), decoding=False)
            before = query.lastProgress["batchId"]
            pid = reader.pid
            assert pid is not None
            cpu0 = spark_cpu()
            jit0 = jit_cpu()
            reader0 = own_cpu(pid)
            t0 = time.perf_counter()
            reader.start()

            def stored() -> bool:
                assert reader is not None
                reader.check()
                return stored_through(log, gtid) is not None

            # The end that counts is the stored record of the source's last transaction.
            wait(stored, 300, "the reader's log")
            reader_s = time.perf_counter() - t0
            end_seq = stored_through(log, gtid)
            assert end_seq is not None
            wait(lambda: applied_all(runner, end_seq), 300, "the pipeline", period=0.01)
            hw_s = time.perf_counter() - t0
            jvm_s, py_s = (b - a for a, b in zip(cpu0, spark_cpu(), strict=True))
            jit_s = jit_cpu() - jit0
            reader_cpu = own_cpu(pid) - reader0
            cpu.setdefault(table[:1], []).append((jvm_s / changes, py_s / changes))
            log.close()
            last = runner.writer.last_committed  # its report comes after Spark's commit
            wait(lambda: (query.lastProgress or {}).get("batchId", -1) >= last, 60, "the report")
            for p in query.recentProgress:
                if p["batchId"] > before and p["numInputRows"]:
                    d = p["durationMs"]
                    print(
                        f"  batch {p['batchId']}: {p['numInputRows']} rows, "
                        + ", ".join(f"{k}={v}" for k, v in sorted(d.items()) if v),
                        file=sys.stderr,
                    )
            assert checksum(target, "bench_hw", table) == expected, "headwater target differs"
            print(
                f"headwater {table}: {hw_s:.2f} s ({reader_s:.2f} s reader catch-up),"
                f" {changes / hw_s:,.0f} rows/s; Spark JVM {jvm_s:.2f} CPU-s"
                f" ({jvm_s / changes * 1e6:.1f} us/change; JIT {jit_s:.2f}), Python workers"
                f" {py_s:.2f} CPU-s"
                f" ({py_s / changes * 1e6:.1f} us/change), reader process {reader_cpu:.2f}"
                f" CPU-s; load {os.getloadavg()[0]:.2f}"
            )
            return hw_s

        #: per-change CPU seconds (JVM, Python workers) of each round, by workload
        cpu: dict[str, list[tuple[float, float]]] = {}

        # Round 1 replicates the naive replicator's binlog; rounds 2.. the same workload on
        # tables of their own, committed while the reader is stopped again. The median
        # round counts: one round's time swings by a micro-batch with the timing of the
        # first trigger (whether it sees the first transaction alone or more).
        rates = [changes / timed("t", changes, expected, source_gtid)]
        for n in range(2, args.rounds + 1):
            stop_reader()
            table = f"t{n}"
            round_changes = workload(source, rows, table)
            gtid = str(source.query("SELECT @@gtid_binlog_pos")[0][0])
            rates.append(
                round_changes / timed(table, round_changes, checksum(source, "bench", table), gtid)
            )
        hw_rate = statistics.median(rates)
        print(f"headwater: median of {len(rates)} rounds {hw_rate:,.0f} rows/s")
        if args.batched_only:
            for label, rate in native_rates.items():
                print(f"MariaDB replication {label}: {rate:,.0f} rows/s (batched)")
            print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
            print(f"pipeline_vs_native_replication={hw_rate / native_rates['serial']:.2f}")
            return

        # PostgreSQL: the same workload by a second pipeline, against COPY of the result.
        pg_s = pg_pipeline(tmp / "task", tmp / "checkpoint_pg", gtid_before)
        assert pg_rows_equal(source), "PostgreSQL target differs"
        copy_rows, copy_s = pg_copy(source)
        pg_rate, copy_rate = changes / pg_s, copy_rows / copy_s
        print(f"headwater into PostgreSQL: {pg_rate:,.0f} rows/s; COPY {copy_rate:,.0f} rows/s")

        # Single-row transactions: MariaDB's replication, then headwater, same binlog; one
        # round per table (``s``, ``s2``, ...), each committed while the reader is stopped;
        # the median of each side's rounds counts (one round of each swung by a fifth).
        single_rounds: dict[str, list[float]] = {}
        for table in singles:
            stop_reader()
            gtid_from = str(source.query("SELECT @@gtid_binlog_pos")[0][0])
            single_changes = single_workload(source, single, table)
            gtid_to = str(source.query("SELECT @@gtid_binlog_pos")[0][0])
            print(f"single-row workload {table}: {single_changes} transactions", file=sys.stderr)
            rates_of = native(source, replica, table, (gtid_from, gtid_to), single_changes)
            rates_of["headwater"] = single_changes / timed(
                table, single_changes, checksum(source, "bench", table), gtid_to
            )
            for label, rate in rates_of.items():
                single_rounds.setdefault(label, []).append(rate)
        native_single = {
            label: statistics.median(r)
            for label, r in single_rounds.items()
            if label != "headwater"
        }
        hw_single = statistics.median(single_rounds["headwater"])

        lat = latency(source, target, args.rate, seconds, first_id=10_000_000)
        print(
            f"latency at {args.rate} rows/s for {seconds:.0f} s: {len(lat)} rows,"
            f" p50={pct(lat, 0.5):.3f} s p99={pct(lat, 0.99):.3f} s"
        )
        print(f"latency_p50_s={pct(lat, 0.5):.3f}")
        print(f"latency_p99_s={pct(lat, 0.99):.3f}")
        if naive_rate is not None:
            print(f"naive: {naive_rate:,.0f} rows/s (batched)")
        for label, rate in native_rates.items():
            print(f"MariaDB replication {label}: {rate:,.0f} rows/s (batched)")
        for label, rate in native_single.items():
            print(
                f"MariaDB replication {label}: {rate:,.0f} rows/s (single-row, median of"
                f" {len(single_rounds[label])})"
            )
        print(
            f"headwater: {hw_rate:,.0f} rows/s (batched), {hw_single:,.0f} rows/s (single-row,"
            f" median of {len(single_rounds['headwater'])})"
        )
        batched = cpu["t"]
        print(
            "headwater CPU per change, batched (median of rounds): Spark JVM"
            f" {statistics.median(j for j, _p in batched) * 1e6:.1f} us, Python workers"
            f" {statistics.median(p for _j, p in batched) * 1e6:.1f} us"
        )
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if naive_rate is not None:
            print(f"pipeline_speedup_vs_naive={hw_rate / naive_rate:.1f}")
        print(f"pipeline_pg_vs_copy={pg_rate / copy_rate:.2f}")
        print(f"pipeline_vs_native_replication_single={hw_single / native_single['serial']:.2f}")
        print(f"pipeline_vs_native_replication={hw_rate / native_rates['serial']:.2f}")
    finally:
        stop.set()
        if running is not None:
            running.join(120)
        if reader is not None:
            reader.stop(again=False)
        source.stop()
        target.stop()
        replica.stop()


if __name__ == "__main__":
    main()
