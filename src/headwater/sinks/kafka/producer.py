"""The executor side of the Kafka sink: the producers of the Spark tasks.

``write_partition(config, batch_id, index, batches)`` sends the messages of one ordered
partition (:mod:`headwater.sinks.bus.spark`) and returns how many it sent.

* ``at_least_once`` producers are reused by the next task of the same Python worker
  (:func:`_idempotent_producer`: a fresh one spends 0.5 s acquiring its producer id);
  ``exactly_once`` creates one per task, its transactional id fencing the last.
* Every producer is idempotent (``enable.idempotence``: the broker drops the duplicates
  of the producer's own retries, and keeps each partition's messages in send order).
* ``exactly_once``: the task's transactional id is ``headwater.<pipeline>.<index>``
  (``init_transactions`` fences a zombie of the same task). The task's "recorded
  position" is a consumer-group offset: group ``headwater.<pipeline>.<index>`` on
  partition 0 of ``positions_topic`` holds ``batch_id + 1`` once the batch's messages are
  committed, written in the same transaction (``send_offsets_to_transaction``), so either
  both are visible or neither. A replayed batch whose offset says it is committed is
  skipped; one whose transaction never committed is sent again in a new transaction.
  (The offset, not its metadata, carries the batch: Tansu 0.6 keeps offsets but drops
  commit metadata.)
* Topics missing on the broker are created first (``create_topics``), ``partitions``
  each, once per process.
* Nothing is polled while producing but when the local queue is full; the ``flush`` that
  ends every call serves the delivery reports (failures only) and raises the first.
* ``at_least_once`` producers are :class:`~headwater.sinks.kafka.native.NativeProducer`
  where librdkafka can be loaded from confluent-kafka's wheel: a change-row batch's
  messages are queued by one C call without the GIL, never Python objects (the same
  librdkafka, settings, partitions and error handling; a differential test against
  confluent-kafka's ``Producer`` on a live broker holds the messages equal). In
  bench/kafka.py the pipeline's rounds fell from 0.89-0.93 s to 0.57-0.63 s (its driver
  process from 0.91-0.96 to 0.60-0.63 CPU-s): the Python loop's ``produce`` calls held
  the GIL that the decoding of the next batch needs.
* Messages are compressed with LZ4 unless ``producer:`` sets ``compression.type``
  (:func:`producer_settings`): JSON change rows compress well, so the broker receives,
  stores and serves a fraction of the bytes.
* ``partitioning: single`` sends to partition 0; ``key`` leaves the choice to the
  ``murmur2_random`` partitioner (the Java client's hash of the key bytes, so consumers
  and other producers agree); messages without a key (tables without a primary key, DDL
  of no database) go to partition 0 so their order holds too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from headwater.errors import SinkError, TransientSinkError
from headwater.sinks.bus.arrow import batch_buffers, batch_messages, batch_records
from headwater.sinks.kafka.configuration import KafkaConfig
from headwater.sinks.kafka.native import NativeProducer, native_producer

if TYPE_CHECKING:
    import pyarrow

__all__ = ["producer_settings", "write_partition"]

log = logging.getLogger(__name__)

_created: set[tuple[str, str]] = set()


def producer_settings(config: KafkaConfig) -> dict[str, Any]:
    """librdkafka settings of the sink's producers (without a transactional id or
    delivery callback); ``config.producer`` overrides any of them.

    ``compression.type`` is ``lz4``: on bench/kafka.py's 300k change rows (118 MB of JSON
    values, 6.6 times smaller in LZ4 frames of 1 MB; real rows vary less and compress
    less) a plain producer's broker CPU fell from 0.26-0.31 s to 0.06-0.09 s, the
    producer's own (its Python thread 0.19 s, librdkafka's 0.23-0.27 s) did not move
    beyond the noise, and its wall time halved (load 3.4-4.2); every Kafka client reads
    LZ4 batches.
    Compression changes no guarantee: a compressed batch is one partition's messages in
    order, retried and de-duplicated whole by the idempotent producer. ``batch.size``
    (4 MB) and ``linger.ms`` (5 or 50) changed nothing measurable there."""
    settings: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
        "partitioner": "murmur2_random",
        "queue.buffering.max.messages": 500_000,
    }
    settings.update(dict(config.producer))
    return settings


def _ensure_topics(config: KafkaConfig, topics: set[str]) -> None:
    missing = {t for t in topics if (config.bootstrap_servers, t) not in _created}
    if not missing or not config.create_topics:
        return
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})
    existing = set(admin.list_topics(timeout=config.timeout_s).topics)
    wanted = [
        NewTopic(t, 1 if t == config.positions_topic else config.partitions, 1)
        for t in sorted(missing - existing)
    ]
    if wanted:
        for topic, future in admin.create_topics(wanted).items():
            try:
                future.result(config.timeout_s)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise SinkError(f"cannot create Kafka topic {topic!r}: {e}") from None
    _created.update((config.bootstrap_servers, t) for t in missing)


class _Errors:
    """The first delivery error of a producer (its callback runs in ``poll``/``flush``)."""

    def __init__(self) -> None:
        self.first: Any = None

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None and self.first is None:
            self.first = (err, msg.topic())


def _with_reports(settings: dict[str, Any], errors: _Errors) -> dict[str, Any]:
    """``settings`` with ``errors`` as the producer's delivery callback, called for failed
    messages only (librdkafka's ``delivery.report.only.error``: no Python call per
    delivered message)."""
    return {**settings, "on_delivery": errors, "delivery.report.only.error": True}


def _raise(errors: _Errors, what: str, producer: Any = None) -> None:
    if isinstance(producer, NativeProducer) and errors.first is None:
        errors.first = producer.take_error()  # (its failures are recorded in C)
    if errors.first is None:
        return
    err, topic = errors.first
    cls = TransientSinkError if err.retriable() else SinkError
    raise cls(f"Kafka {what} to topic {topic!r} failed: {err.str()}", table=topic)


def _send(producer: Any, config: KafkaConfig, batches: Iterator[Any]) -> int:
    """Produce the messages of ``batches`` in order; the number produced. Nothing per
    message but the produce call: a batch's topics, keys and values are built column-wise
    (:func:`headwater.sinks.bus.arrow.batch_records`) and produced in a tight loop, and
    delivery reports come back for failures only (``delivery.report.only.error``,
    :func:`producer_settings`). A batch the column-wise path does not cover (DDL rows,
    tombstones, other formats) goes message by message. A :class:`NativeProducer` takes a
    covered batch as buffers (:func:`headwater.sinks.bus.arrow.batch_buffers`) in one C
    call.

    No ``poll`` between batches: a ``poll(0)`` after each Arrow batch cost 0.11-0.2 s of
    the producing thread's CPU per 300k messages (3-4 ms a call, measured against the
    same loop without it, as the plain producer of bench/kafka.py runs), for nothing: a
    delivery report comes only for a failure, and those are served by the ``flush`` that
    ends every call (or by the ``poll`` of :func:`_produce_when_room` when the local
    queue is full), whose first error is raised."""
    single = config.partitioning == "single"
    native = isinstance(producer, NativeProducer)
    sent = 0
    for batch in batches:
        if native:
            rows = batch_buffers(batch, config.bus)
            if rows is not None:
                _ensure_topics(config, set(rows.names))
                sent += producer.produce_rows(rows, single)
                continue
        records = batch_records(batch, config.bus)
        if records is None:
            messages = list(batch_messages(batch, config.bus))
            _ensure_topics(config, {m.topic for m in messages})
            topics = [m.topic for m in messages]
            keys = [m.key for m in messages]
            values: Sequence[bytes | None] = [m.value for m in messages]
        else:
            _ensure_topics(config, set(records.names))
            topics, keys, values = records.topics, records.keys, records.values
        if single:
            partitions: list[int] | None = [0] * len(keys)
        elif None in keys:
            partitions = [-1 if k is not None else 0 for k in keys]
        else:
            partitions = None  # every message keyed: the partitioner picks by key
        sent += _produce(producer, topics, keys, values, partitions)
    return sent


def _produce(
    producer: Any,
    topics: Sequence[str],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    partitions: Sequence[int] | None,
) -> int:
    """Produce ``values`` with their ``topics`` and ``keys`` in order to ``partitions``
    (None: librdkafka's partitioner, by key; -1 is its RD_KAFKA_PARTITION_UA, the same);
    when the local queue is full, deliveries drain it first. The number produced."""
    produce = producer.produce
    if partitions is None:
        for topic, value, key in zip(topics, values, keys, strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                _produce_when_room(producer, topic, value, key, -1)
    else:
        for topic, value, key, partition in zip(topics, values, keys, partitions, strict=True):
            try:
                produce(topic, value, key, partition)
            except BufferError:
                _produce_when_room(producer, topic, value, key, partition)
    return len(values)


def _produce_when_room(producer: Any, topic: str, value: Any, key: Any, partition: int) -> None:
    """Produce one message once the local queue has room (``poll`` serves deliveries)."""
    while True:
        producer.poll(0.05)
        try:
            producer.produce(topic, value, key, partition)
            return
        except BufferError:
            continue


def write_partition(
    config: KafkaConfig, batch_id: int, index: int, batches: Iterator[pyarrow.RecordBatch]
) -> int:
    """Send one ordered partition's messages (module docstring); the number sent."""
    if config.delivery != "exactly_once":
        producer, errors = _idempotent_producer(config)
        sent = _send(producer, config, batches)
        left = producer.flush(config.timeout_s)
        _raise(errors, "delivery", producer)
        if left:
            raise TransientSinkError(f"Kafka: {left} messages not delivered in {config.timeout_s}s")
        _release(config, producer, errors)  # only a producer that delivered all is reused
        return sent
    return _write_transaction(config, batch_id, index, batches, _Errors())


#: The at-least-once producers of this process (a Spark Python worker is reused from task to
#: task, a consumer calls once per batch), by settings. A fresh idempotent producer spends
#: about 0.5 s acquiring its producer id before the first message goes out (measured on
#: Tansu: 0.5 s for 1 000 messages, 4 ms on the same producer after that): that was most of
#: a micro-batch's fixed cost. Reuse keeps the guarantees: each call ends with a ``flush``
#: whose failures it raises, and only a producer that delivered everything is put back.
#: Up to :data:`IDLE_PRODUCERS` are kept per settings: the driver's bus path
#: (:mod:`headwater.pipeline.busdirect`) runs a writer thread per task index at once, and
#: with one kept the others acquired a producer id every batch.
_PRODUCERS: dict[tuple[tuple[str, str], ...], list[tuple[Any, _Errors]]] = {}
_PRODUCERS_LOCK = threading.Lock()
IDLE_PRODUCERS = 8


def _settings_key(config: KafkaConfig) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in producer_settings(config).items()))


def _idempotent_producer(config: KafkaConfig) -> tuple[Any, _Errors]:
    """This process's producer of ``config``'s settings, its error record cleared. Not
    shared by two callers at once: a second concurrent caller gets its own producer."""
    from confluent_kafka import Producer

    key = _settings_key(config)
    with _PRODUCERS_LOCK:
        idle = _PRODUCERS.get(key)
        found = idle.pop() if idle else None
    if found is None:
        errors = _Errors()
        settings = producer_settings(config)
        native = native_producer(settings)  # (its delivery failures are kept in C)
        found = (native or Producer(_with_reports(settings, errors)), errors)
    found[1].first = None
    return found


def _release(config: KafkaConfig, producer: Any, errors: _Errors) -> None:
    """Give a producer that delivered everything back for the next call."""
    with _PRODUCERS_LOCK:
        idle = _PRODUCERS.setdefault(_settings_key(config), [])
        if len(idle) < IDLE_PRODUCERS:
            idle.append((producer, errors))


def _write_transaction(
    config: KafkaConfig,
    batch_id: int,
    index: int,
    batches: Iterator[pyarrow.RecordBatch],
    errors: _Errors,
) -> int:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    first = next(batches, None)
    if first is None:
        return 0  # nothing for this task in this batch: no transaction
    name = f"headwater.{config.pipeline}.{index}"
    _ensure_topics(config, {config.positions_topic})
    producer = Producer(
        _with_reports({**producer_settings(config), "transactional.id": name}, errors)
    )
    consumer = Consumer(
        {"bootstrap.servers": config.bootstrap_servers, "group.id": name,
         "enable.auto.commit": False, "isolation.level": "read_committed"}
    )  # fmt: skip
    position = TopicPartition(config.positions_topic, 0)
    try:
        producer.init_transactions(config.timeout_s)  # fences this task's earlier producer
        done = consumer.committed([position], timeout=config.timeout_s)[0].offset
        if done >= batch_id + 1:
            log.info("kafka sink: batch %d task %d already committed; skipped", batch_id, index)
            return 0
        producer.begin_transaction()
        sent = _send(producer, config, _chain(first, batches))
        producer.flush(config.timeout_s)
        _raise(errors, "delivery")
        producer.send_offsets_to_transaction(
            [TopicPartition(config.positions_topic, 0, batch_id + 1)],
            consumer.consumer_group_metadata(),
            config.timeout_s,
        )
        producer.commit_transaction(config.timeout_s)
        return sent
    except KafkaException as e:
        error = e.args[0]
        if error.txn_requires_abort():
            producer.abort_transaction(config.timeout_s)
        cls = TransientSinkError if error.retriable() else SinkError
        raise cls(f"Kafka transaction {name} of batch {batch_id}: {error.str()}") from None
    finally:
        consumer.close()


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
