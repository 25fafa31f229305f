"""The Kafka sink's at-least-once producer with its produce loop in C.

:class:`NativeProducer` wraps :mod:`headwater._native._rdproduce`: a librdkafka producer
(the library confluent-kafka wraps, loaded from the copy its wheel ships, so both run the
same librdkafka with the same settings) whose :meth:`~NativeProducer.produce_rows` queues
a whole Arrow batch's messages in one call without the GIL, the keys read from the
batch's ``key`` column and the values from one buffer joined in C
(:func:`headwater.sinks.bus.arrow.batch_buffers`). The Python loop it replaces called
``Producer.produce`` per message with the GIL held; in the bus sinks' driver path
(:mod:`headwater.pipeline.busdirect`) that loop and the decoding of the next batch took
turns on one GIL (bench/kafka.py: the produce loop was about half the writer thread's
samples).

Semantics are the Python loop's (:mod:`headwater.sinks.kafka.producer`): the same
librdkafka settings (:func:`~headwater.sinks.kafka.producer.producer_settings`), the
``murmur2_random`` partitioner by key and partition 0 for a message without a key (or for
every message with ``partitioning: single``), a full local queue drained by ``poll`` and
the message tried again, and delivery failures recorded by a C delivery callback (the
first one's error code and topic) and raised after ``flush`` as the Python loop raises
them. Used for ``at_least_once`` only: ``exactly_once`` needs confluent-kafka's
transactional API.

When the library cannot be loaded (confluent-kafka built against a system librdkafka
without the bundled copy, a symbol missing), or a setting is not plain text (a
confluent-kafka callback), :func:`native_producer` returns None and the sink uses
confluent-kafka's ``Producer`` as before; ``HEADWATER_KAFKA_NATIVE=0`` forces that.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headwater.sinks.bus.arrow import Buffers

__all__ = ["NativeProducer", "library_path", "native_producer"]

log = logging.getLogger(__name__)

#: librdkafka's RD_KAFKA_RESP_ERR__QUEUE_FULL (rdkafka.h): the local queue is full.
QUEUE_FULL = -184

_lock = threading.Lock()
_loaded: bool | None = None


def library_path() -> str | None:
    """The librdkafka that confluent-kafka's wheel ships (``confluent_kafka.libs``), or
    None."""
    import confluent_kafka

    package = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    found = sorted(glob.glob(os.path.join(package + ".libs", "librdkafka*.so*")))
    return found[0] if found else None


def _load() -> bool:
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = False
            if os.environ.get("HEADWATER_KAFKA_NATIVE", "1") == "0":
                log.info("kafka sink: the C produce loop is off (HEADWATER_KAFKA_NATIVE=0)")
                return False
            path = library_path()
            if path is None:
                log.info("kafka sink: confluent-kafka ships no librdkafka copy; "
                         "messages are produced from Python")  # fmt: skip
                return False
            try:
                from headwater._native._rdproduce import load

                load(path)
                _loaded = True
            except (ImportError, OSError) as e:
                log.info("kafka sink: the C produce loop is unavailable (%s)", e)
        return _loaded


def _text(value: Any) -> str | None:
    """A setting's value as librdkafka's text (confluent-kafka's conversion: booleans as
    ``true``/``false``), or None for a value that is not plain (a callback, a dict)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


class NativeProducer:
    """A librdkafka producer with confluent-kafka's ``produce``/``poll``/``flush`` calls
    and :meth:`produce_rows` (module docstring). One thread at a time."""

    def __init__(self, settings: dict[str, Any]) -> None:
        from headwater._native._rdproduce import Producer

        pairs = []
        for name, value in settings.items():
            text = _text(value)
            if text is None:
                raise ValueError(f"Kafka producer setting {name!r} is not plain text")
            pairs.append((name, text))
        self._p = Producer(pairs)

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1) -> None:  # fmt: skip
        """One message (confluent-kafka's ``produce``: ``BufferError`` when the local
        queue is full)."""
        _check(self._p.produce(topic, value, key, partition), topic)

    def produce_rows(self, rows: Buffers, single: bool) -> int:
        """Every message of ``rows`` in order (partition 0 with ``single``); the number
        queued (all of them, or an error is raised)."""
        if rows.n == 0:
            return 0
        validity, offsets, data, offset, wide = rows.key
        done, err = self._p.produce_rows(
            rows.n, rows.topics, rows.groups, rows.goffset, validity, offsets, data, offset,
            wide, rows.values[0], rows.values[1], single,
        )  # fmt: skip
        if err:
            _check(err, ", ".join(sorted(rows.names)))
        return int(done)

    def poll(self, timeout: float = 0.0) -> int:
        return int(self._p.poll(max(0, int(timeout * 1000))))

    def flush(self, timeout: float = -1.0) -> int:
        """Waits for every message's delivery (``timeout`` seconds; negative: no limit);
        how many are left."""
        return int(self._p.flush(-1 if timeout < 0 else int(timeout * 1000)))

    def take_error(self) -> tuple[Any, str] | None:
        """The first failed delivery since the last call, as (``KafkaError``, topic), or
        None."""
        from confluent_kafka import KafkaError

        first = self._p.take_error()
        if first is None:
            return None
        code, topic, failed = first
        log.warning("kafka sink: %d messages failed delivery, the first to %r", failed, topic)
        return KafkaError(code), topic

    def close(self) -> None:
        self._p.close()


def _check(err: int, topic: str) -> None:
    """confluent-kafka's exceptions for a produce error code."""
    if err == 0:
        return
    from confluent_kafka import KafkaError, KafkaException

    if err == QUEUE_FULL:
        raise BufferError("Local: Queue full")
    raise KafkaException(KafkaError(err, f"Unable to produce message to {topic!r}"))


def native_producer(settings: dict[str, Any]) -> NativeProducer | None:
    """A :class:`NativeProducer` of ``settings``, or None where the sink uses
    confluent-kafka's producer (module docstring)."""
    if not _load():
        return None
    try:
        return NativeProducer(settings)
    except ValueError as e:  # (confluent-kafka's Producer then reports a bad setting itself)
        log.info("kafka sink: messages produced from Python: %s", e)
        return None
