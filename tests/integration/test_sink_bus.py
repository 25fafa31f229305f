"""Bus sinks end to end: live MariaDB -> reader -> ``headwater pipeline run`` -> Kafka
(Tansu), NATS JetStream and Redis Streams, read back with each bus's own client.

One pipeline process per life writes all four bus sinks (Kafka per key, Kafka global,
NATS, Redis) and is SIGKILLed three times: one set of JVM starts proves every sink.
Oracles: the set of change sequences of the task's change log (a batch read of the
source), and the source tables themselves: replaying the received change-row messages per
key in order must rebuild every source table exactly.

Tansu 0.6 (the Kafka-protocol broker here) accepts transactions, fences producers and
keeps transactional offset commits atomic, but a ``read_committed`` consumer still sees
messages of aborted transactions (test_tansu_read_committed_shows_aborted_messages): so
the Kafka pipeline test runs at-least-once and allows duplicates only as replays (a
sequence seen before), never as reordering.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from headwater.sandbox import MariadbSandbox
from headwater.sinks.bus.messages import BusOptions
from tests.integration.bus_support import kafka_broker, nats_server, redis_server  # noqa: F401
from tests.integration.test_pipeline_e2e import (  # noqa: F401  (reader is a fixture)
    TABLES,
    Workload,
    _mysql_rows,
    reader,
    run_available_now,
)
from tests.integration.test_pipeline_kill import wait_until
from tests.integration.test_reader_capture import Running, wait_caught_up

pytestmark = pytest.mark.integration


def start_pipeline(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``headwater pipeline run`` in a process of its own, stderr appended to ``log``."""
    with log.open("ab") as err:
        command = [sys.executable, "-m", "headwater.cli.main", "pipeline", "run",
                   "--config", str(config), *args]  # fmt: skip
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)


def read_log(spark: SparkSession, task_dir: Path) -> Any:
    """The task's change log as a batch DataFrame of change rows."""
    from headwater.spark import register

    register(spark)
    return spark.read.format("headwater").option("path", str(task_dir)).load()


def log_changes(spark: SparkSession, task_dir: Path, db: str) -> dict[int, dict[str, Any]]:
    """Every row change of ``db`` in the change log, by sequence."""
    df = read_log(spark, task_dir)
    rows = df.where(df.database == db).where(df.op != "ddl").collect()
    return {int(r["sequence"]): r.asDict() for r in rows}


def rebuild(changes: list[dict[str, Any]]) -> dict[str, list[tuple[str | None, ...]]]:
    """Tables rebuilt from change-row messages in the order given (first copies only)."""
    state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t: {} for t in TABLES}
    for c in changes:
        _, key_cols, _ = TABLES[c["table"]]
        if c["before"] is not None:
            state[c["table"]].pop(tuple(c["before"][k] for k in key_cols), None)
        if c["after"] is not None:
            state[c["table"]][tuple(c["after"][k] for k in key_cols)] = c["after"]
    out = {}
    for table, rows in state.items():
        _, _, columns = TABLES[table]
        out[table] = [
            tuple(None if r[c] is None else str(r[c]) for c in columns)
            for _, r in sorted(rows.items())
        ]
    return out


def first_copies(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[int] = set()
    out = []
    for m in messages:
        if m["sequence"] not in seen:
            seen.add(m["sequence"])
            out.append(m)
    return out


# --- Kafka ----------------------------------------------------------------------------------


def kafka_read(broker: str, topics: list[str], want: int, timeout: float = 60) -> dict[Any, list]:
    """Messages by (topic, partition), in offset order, until ``want`` are read and no more
    come for a second. Topics not created yet are waited for (a writer started with the
    reader may create them later), up to ``timeout``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker, "group.id": f"t{time.time_ns()}",
                         "enable.auto.commit": False})  # fmt: skip
    meta, deadline = consumer.list_topics(timeout=10).topics, time.monotonic() + timeout
    while want and not set(topics) <= set(meta) and time.monotonic() < deadline:
        time.sleep(0.2)
        meta = consumer.list_topics(timeout=10).topics
    consumer.assign(
        [TopicPartition(t, p, 0) for t in topics if t in meta for p in meta[t].partitions]
    )
    out: dict[Any, list] = {}
    n, quiet, deadline = 0, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline and (n < want or time.monotonic() - quiet < 1.0):
        m = consumer.poll(0.2)
        if m is None or m.error():
            continue
        out.setdefault((m.topic(), m.partition()), []).append(m)
        n, quiet = n + 1, time.monotonic()
    consumer.close()
    return out


def bus_config(
    path: Path, task_dir: Path, db: str, broker: str, nats_url: str, redis: tuple[str, int]
) -> Path:
    """One pipeline, four bus sinks: Kafka per key and global, NATS, Redis."""
    stream = nats_stream(db)
    path.write_text(
        f"name: bus\nsource:\n  path: {task_dir}\ncheckpoint: {path.parent / 'ck'}\n"
        "progress: 0.5\nsinks:\n"
        f"  - type: kafka\n    bootstrap_servers: '{broker}'\n"
        f"    topic: 'perkey.{{database}}.{{table}}'\n    partitions: 3\n"
        f"  - type: kafka\n    bootstrap_servers: '{broker}'\n"
        f"    topic: 'global.{db}'\n    partitioning: single\n"
        f"  - type: nats\n    url: '{nats_url}'\n    stream: {stream}\n    window: 50\n"
        f"    topic: '{stream}.{{database}}.{{table}}'\n    schema_topic: '{stream}.schema'\n"
        f"  - type: redis\n    host: {redis[0]}\n    port: {redis[1]}\n"
        f"    topic: 'r.{{database}}.{{table}}'\n"
    )
    return path


def nats_stream(db: str) -> str:
    return f"s{abs(hash(db)) % 10**8}"


def nats_read(url: str, stream: str, db: str) -> list[dict[str, Any]]:
    """Every message of ``db``'s subjects in the stream, in stream order."""

    async def read() -> list[dict[str, Any]]:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        sub = await js.pull_subscribe(f"{stream}.{db}.>", durable=None, stream=stream)
        out: list[dict[str, Any]] = []
        with contextlib.suppress(asyncio.TimeoutError):  # fetch times out: nothing left
            while True:
                for m in await sub.fetch(500, timeout=2):
                    out.append(orjson.loads(m.data))
                    await m.ack()
        await nc.close()
        return out

    return asyncio.run(read())


@pytest.mark.slow
@pytest.mark.timeout(900)  # three pipeline JVM starts: about 90 s quiet, 10 min at load 25
def test_bus_sinks_per_key_and_global_with_three_sigkills(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    kafka_broker: str,  # noqa: F811
    nats_server: str,  # noqa: F811
    redis_server: tuple[str, int],  # noqa: F811
    tmp_path: Path,
) -> None:
    """One pipeline process per life (three SIGKILLs) writes Kafka per key, Kafka global,
    NATS and Redis; then a replay of the whole log through NATS and Redis (as after a
    crash, certain to happen here) must be dropped by their de-duplication."""
    import redis

    from headwater.pipeline.config import load_pipeline_config
    from headwater.pipeline.runner import PipelineRunner

    running, task_dir = reader
    config = bus_config(tmp_path / "pipeline.yaml", task_dir, db, kafka_broker, nats_server,
                        redis_server)  # fmt: skip
    log = tmp_path / "pipeline.log"
    workload = Workload(mariadb, db, seed=23)
    killed, done = threading.Event(), threading.Event()

    def produce() -> None:
        try:  # until the last kill (bounded): the kills fall inside the workload
            for _ in range(150):
                workload.run(3)
                if killed.is_set():
                    break
                time.sleep(0.5)  # spreads the workload over the kills; not synchronization
        finally:
            done.set()

    threading.Thread(target=produce, daemon=True).start()

    def batches(log: Path) -> int:
        return log.read_text().count("pipeline bus: batch=") if log.exists() else 0

    rng = random.Random(3)
    for _ in range(3):
        proc = start_pipeline(config, log, "--log-level", "info")
        try:
            before = batches(log)
            wait_until(lambda p=proc, b=before: p.poll() is not None or batches(log) > b, 300,
                       "a batch")  # fmt: skip
            assert proc.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=rng.uniform(0.0, 1.0))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    killed.set()
    # every batch of the second and third lives (ids 1+) was sent from the driver
    # (headwater.pipeline.busdirect), each life's first one before its progress line
    assert log.read_text().count("sent from the driver") >= 2, log.read_text()[-3000:]
    wait_until(done.is_set, 60, "the workload")
    wait_caught_up(running.task, mariadb, timeout=60)
    run_available_now(spark, config)
    expected = log_changes(spark, task_dir, db)
    assert len(expected) > 50
    source_tables = {t: _mysql_rows(mariadb, db, t) for t in TABLES}

    # Per-key mode: each key's messages in one partition, first copies in sequence order.
    topics = [f"perkey.{db}.{t}" for t in TABLES]
    got = kafka_read(kafka_broker, topics, len(expected))
    all_msgs = [orjson.loads(m.value()) for ms in got.values() for m in ms]
    assert {m["sequence"] for m in all_msgs} == set(expected)
    assert len(all_msgs) >= len(expected)
    per_key: dict[bytes, list[int]] = {}
    partition_of: dict[bytes, set[Any]] = {}
    for tp, ms in got.items():
        seen: set[int] = set()
        for m in ms:
            seq = orjson.loads(m.value())["sequence"]
            partition_of.setdefault(m.key(), set()).add(tp)
            if seq not in seen:  # a replay re-sends; its first copy is what orders
                seen.add(seq)
                per_key.setdefault(m.key(), []).append(seq)
    assert all(len(tps) == 1 for tps in partition_of.values())
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs), f"key {key!r} out of order"
    assert len({tp[1] for tp in got}) > 1  # the keys are spread over partitions
    ordered = first_copies(sorted(all_msgs, key=lambda m: m["sequence"]))
    assert rebuild(ordered) == source_tables

    # Global mode: one partition, the first copies in log order; nothing else.
    glob = kafka_read(kafka_broker, [f"global.{db}"], len(expected))
    assert list(glob) == [(f"global.{db}", 0)]
    firsts = first_copies([orjson.loads(m.value()) for m in glob[(f"global.{db}", 0)]])
    assert [m["sequence"] for m in firsts] == sorted(expected)
    assert rebuild(firsts) == source_tables

    # NATS and Redis: the whole log again (a replay), then every change exactly once.
    runner = PipelineRunner(load_pipeline_config(config), spark=spark)
    replay = read_log(spark, task_dir)
    for sink in runner.sinks[2:]:
        sink.write_batch(replay.where(replay.database == db), 0)
    nats_msgs = nats_read(nats_server, nats_stream(db), db)
    assert sorted(m["sequence"] for m in nats_msgs) == sorted(expected)  # once each
    for table in TABLES:
        seqs = [m["sequence"] for m in nats_msgs if m["table"] == table]
        assert seqs == sorted(seqs)
    assert rebuild(nats_msgs) == source_tables

    client = redis.Redis(host=redis_server[0], port=redis_server[1])
    entries = []
    for table in TABLES:
        for entry_id, fields in client.xrange(f"r.{db}.{table}"):
            value = orjson.loads(fields[b"value"])
            assert entry_id.decode() == f"{value['sequence']}-0"
            entries.append(value)
    client.close()
    assert sorted(m["sequence"] for m in entries) == sorted(expected)
    entries.sort(key=lambda m: m["sequence"])
    assert rebuild(entries) == source_tables


def test_kafka_exactly_once_skips_a_committed_batch_replayed(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    kafka_broker: str,  # noqa: F811
) -> None:
    from headwater.sinks.kafka import KafkaConfig, KafkaSink

    running, task_dir = reader
    Workload(mariadb, db, seed=4).run(30)
    wait_caught_up(running.task, mariadb)
    df = read_log(spark, task_dir)
    df = df.where(df.database == db)
    topic = f"eos.{db}"
    sink = KafkaSink(KafkaConfig(kafka_broker, pipeline=f"eos{db}", delivery="exactly_once",
                                 bus=BusOptions(format="debezium", topic=topic)))  # fmt: skip
    for batch_id in (0, 0, 1):  # batch 0 replayed after it committed; then batch 1
        sink.write_batch(df if batch_id == 0 else df.limit(0), batch_id)
    # A primary key change is two Debezium messages (delete, create): no tombstones here.
    rows = df.where(df.op != "ddl").count() + df.where(df.before_key.isNotNull()).count()
    got = kafka_read(kafka_broker, [topic], rows)
    values = [orjson.loads(m.value()) for ms in got.values() for m in ms]
    assert len(values) == rows  # once, not twice
    assert {v["op"] for v in values} <= {"c", "u", "d"}
    assert all(
        set(v) == {"before", "after", "source", "op", "ts_ms", "transaction"} for v in values
    )


def test_tansu_read_committed_shows_aborted_messages(kafka_broker: str) -> None:  # noqa: F811
    """What the broker lacks: aborted transactional messages stay visible to read_committed
    consumers. When this fails, Tansu filters them and the Kafka test can ask for exactly
    once end to end."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"aborted{time.time_ns()}"
    producer = Producer({"bootstrap.servers": kafka_broker, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": topic,
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            seen.append(m.value())
    consumer.close()
    assert seen == [b"committed", b"aborted"]


def test_kafka_apply_changes_without_spark_global_order(kafka_broker: str) -> None:  # noqa: F811
    """``apply_changes`` (no Spark): rows given out of order arrive in sequence order on
    partition 0 (``partitioning: single``), DDL on the schema topic."""
    from headwater.sinks.kafka import KafkaConfig, KafkaSink

    name = f"apply{time.time_ns()}"
    bus = BusOptions(topic=name, schema_topic=f"{name}.ddl")
    sink = KafkaSink(KafkaConfig(kafka_broker, partitioning="single", bus=bus))
    rows: list[dict[str, Any]] = [
        {"source": "s", "database": "d", "table": "t", "op": "insert", "sequence": seq,
         "key": {"id": seq}, "after": {"id": seq}, "before": None}
        for seq in (5, 3, 9, 1)
    ]  # fmt: skip
    ddl = {"source": "s", "database": "d", "table": "t", "op": "ddl", "sequence": 4,
           "key": None, "before": None, "after": None, "sql": "ALTER TABLE t ADD x"}  # fmt: skip
    rows.append(ddl)
    result = sink.apply_changes(rows, batch_id=0)
    assert result.upserts == 5
    got = kafka_read(kafka_broker, [name, f"{name}.ddl"], 5)
    assert [orjson.loads(m.value())["sequence"] for m in got[(name, 0)]] == [1, 3, 5, 9]
    (ddl,) = got[(f"{name}.ddl", 0)]
    assert orjson.loads(ddl.value())["sql"] == "ALTER TABLE t ADD x"


def test_nats_window_keeps_order_and_a_replay_is_dropped(nats_server: str) -> None:  # noqa: F811
    """The NATS publisher without Spark: 3 000 messages with up to 100 acknowledgements
    outstanding arrive in send order; the same batch again (a replay) stores nothing."""
    import pyarrow as pa

    from headwater.changes.schema import change_arrow_schema
    from headwater.sinks.nats import NatsConfig
    from headwater.sinks.nats.publisher import write_partition

    stream = f"w{time.time_ns()}"
    bus = BusOptions(topic=f"{stream}.{{database}}.{{table}}", schema_topic=f"{stream}.ddl")
    config = NatsConfig(nats_server, bus=bus, stream=stream, window=100)
    rows = [
        {"source": "s", "database": "d", "table": f"t{i % 3}", "op": "insert", "ts_us": i,
         "commit_ts": None, "change_id": 1, "file_num": 1, "offset": i, "event_index": 0,
         "gtid": "", "txn_id": "1:4", "sequence": (i + 1) << 24, "key": f'{{"id":{i}}}',
         "before": None, "after": f'{{"id":{i}}}', "schema_version": 1, "sql": None,
         "before_key": None}
        for i in range(3000)
    ]  # fmt: skip
    batches = pa.Table.from_pylist(rows, schema=change_arrow_schema()).to_batches(1000)
    assert write_partition(config, 0, iter(batches)) == 3000
    assert write_partition(config, 0, iter(batches)) == 3000  # sent; the server drops them
    got = nats_read(nats_server, stream, "d")
    assert [m["sequence"] for m in got] == [r["sequence"] for r in rows]
