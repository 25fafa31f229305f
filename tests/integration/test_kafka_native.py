"""The Kafka sink's C produce loop (:mod:`headwater.sinks.kafka.native`) against
confluent-kafka's ``Producer``, on a live broker (Tansu, the fixture's).

Differential: the same change-row batches produced by the sink's ``_send`` once through
a confluent-kafka ``Producer`` (the Python loop, one ``produce`` call a message) and once
through the C loop, to topics of their own, are read back with a Kafka consumer: every
(table, partition) must hold the same keys and values in the same order (the same
librdkafka partitioner picks the same partition for a key; null keys go to partition 0 on
both). Then what only a live broker shows: a full local queue drained inside the C loop,
``partitioning: single``, and a delivery failure raised as the Python loop raises it.
"""

from __future__ import annotations

import random
import time
from typing import Any

import orjson
import pyarrow as pa
import pytest

from headwater.changes.schema import change_arrow_schema
from headwater.errors import SinkError
from headwater.sinks.bus.messages import BusOptions
from headwater.sinks.kafka import KafkaConfig
from headwater.sinks.kafka.native import NativeProducer, native_producer
from headwater.sinks.kafka.producer import (
    _Errors,
    _idempotent_producer,
    _raise,
    _send,
    _with_reports,
    producer_settings,
    write_partition,
)
from tests.integration.bus_support import free_port, kafka_broker  # noqa: F401
from tests.integration.test_sink_bus import kafka_read

pytestmark = pytest.mark.integration

TABLES = ["orders", "items", "users"]


def change_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Row changes of three tables: some without a key, strings that need escaping."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ident = rng.randrange(200)
        op = rng.choice(["insert", "update", "delete"])
        image = orjson.dumps({"id": ident, "note": rng.choice(['q"u\\ote', "\u4e2d\n", None])})
        out.append({
            "source": "src", "database": "shop", "table": rng.choice(TABLES), "op": op,
            "ts_us": 1_700_000_000_000_000 + i, "commit_ts": None, "change_id": 1,
            "file_num": 3, "offset": 4 * i, "event_index": i % 5,
            "gtid": rng.choice(["0-1-7", 'g"\t']), "txn_id": "0-1-7", "sequence": i + 1,
            "key": None if rng.random() < 0.1 else orjson.dumps({"id": ident}).decode(),
            "before": None if op == "insert" else image.decode(),
            "after": None if op == "delete" else image.decode(),
            "schema_version": 1, "sql": None, "before_key": None,
        })  # fmt: skip
    return out


def batches(n: int, seed: int, size: int) -> list[pa.RecordBatch]:
    table = pa.Table.from_pylist(change_rows(n, seed), schema=change_arrow_schema())
    return table.drop_columns(["commit_ts"]).to_batches(max_chunksize=size)


def config(broker: str, prefix: str, **kw: Any) -> KafkaConfig:
    return KafkaConfig(broker, bus=BusOptions(topic=prefix + ".{table}"), **kw)


def by_table(got: dict[Any, list[Any]], prefix: str) -> dict[tuple[str, int], list[Any]]:
    """(table, partition) -> [(key, value)] in offset order."""
    return {
        (topic[len(prefix) + 1 :], part): [(m.key(), m.value()) for m in messages]
        for (topic, part), messages in got.items()
    }


def test_the_c_loop_sends_what_confluent_kafka_sends(kafka_broker: str) -> None:  # noqa: F811
    run = f"nat{time.time_ns()}"
    data = batches(3000, 11, 700)  # (several batches, one partial)
    sent = {}
    for side in ("python", "native"):
        cfg = config(kafka_broker, f"{run}.{side}")
        settings = producer_settings(cfg)
        errors = _Errors()
        if side == "native":
            producer: Any = native_producer(settings)
            assert isinstance(producer, NativeProducer)
        else:
            producer = __import__("confluent_kafka").Producer(_with_reports(settings, errors))
        assert _send(producer, cfg, iter(data)) == 3000
        assert producer.flush(30) == 0
        _raise(errors, "delivery", producer)
        topics = [f"{run}.{side}.{t}" for t in TABLES]
        sent[side] = by_table(kafka_read(kafka_broker, topics, 3000), f"{run}.{side}")
    assert sum(len(v) for v in sent["native"].values()) == 3000
    assert sent["native"] == sent["python"]
    # every table spread over the partitions by key, and the keyless on partition 0
    assert {part for _, part in sent["native"]} == {0, 1, 2}
    keyless = [k for msgs in sent["native"].values() for k, _ in msgs if k is None]
    assert keyless and all(
        k is not None for (t, part), msgs in sent["native"].items() if part for k, _ in msgs
    )


def test_a_full_local_queue_is_drained_inside_the_c_loop(kafka_broker: str) -> None:  # noqa: F811
    """``queue.buffering.max.messages`` 50 against 2 000 messages of one call: the loop
    polls and tries again until each is queued; all arrive, each key's in order."""
    run = f"full{time.time_ns()}"
    cfg = config(kafka_broker, run, producer=(("queue.buffering.max.messages", "50"),))
    data = batches(2000, 12, 2000)
    producer, errors = _idempotent_producer(cfg)
    assert isinstance(producer, NativeProducer)
    assert _send(producer, cfg, iter(data)) == 2000
    assert producer.flush(30) == 0
    _raise(errors, "delivery", producer)
    got = kafka_read(kafka_broker, [f"{run}.{t}" for t in TABLES], 2000)
    values = [orjson.loads(m.value()) for msgs in got.values() for m in msgs]
    assert sorted(v["sequence"] for v in values) == list(range(1, 2001))
    for msgs in got.values():
        seqs = [orjson.loads(m.value())["sequence"] for m in msgs]
        assert seqs == sorted(seqs)


def test_single_partitioning_keeps_the_batch_order(kafka_broker: str) -> None:  # noqa: F811
    run = f"single{time.time_ns()}"
    cfg = config(kafka_broker, run, partitioning="single")
    assert write_partition(cfg, 0, 0, iter(batches(900, 13, 250))) == 900
    got = kafka_read(kafka_broker, [f"{run}.{t}" for t in TABLES], 900)
    assert {part for _, part in got} == {0}
    for msgs in got.values():
        seqs = [orjson.loads(m.value())["sequence"] for m in msgs]
        assert seqs == sorted(seqs) and len(seqs) > 200


def test_a_failed_delivery_is_raised_with_its_topic() -> None:
    """No broker on the port: every message times out (``message.timeout.ms`` 800); the
    C delivery callback records it and ``write_partition`` raises the Python loop's
    error, naming the topic, and does not keep the producer."""
    port = free_port()
    cfg = KafkaConfig(
        f"127.0.0.1:{port}", bus=BusOptions(topic="gone.{table}"), create_topics=False,
        producer=(("message.timeout.ms", "800"),), timeout_s=20,
    )  # fmt: skip
    assert isinstance(_idempotent_producer(cfg)[0], NativeProducer)
    with pytest.raises(SinkError) as caught:
        write_partition(cfg, 0, 0, iter(batches(30, 14, 30)))
    assert "Kafka delivery to topic 'gone." in str(caught.value)
    assert "timed out" in str(caught.value)
