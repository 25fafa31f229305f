"""Options of the Kafka sink: :class:`KafkaConfig`, and the parsing of its section.

``bootstrap_servers`` is required. ``partitioning``: ``key`` (the message key's hash,
Java clients' murmur2, picks the partition: each key's changes in order) or ``single``
(partition 0 of each topic, the batch written in log order by one task: global order).
``delivery``: ``at_least_once`` (idempotent producer; a batch replayed after a crash is
sent again) or ``exactly_once`` (each task's messages and the batch id it has written
commit in one Kafka transaction; a replayed batch already committed is skipped).
``producer`` adds librdkafka settings; settings that carry secrets are refused (they would
sit in the pipeline file and in Spark's task closures).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.sinks.bus.messages import BusOptions
from headwater.sinks.bus.section import BUS_FIELDS, bus_options
from headwater.sinks.section import SinkContext, SinkSection, section_fields

__all__ = ["DELIVERIES", "PARTITIONINGS", "KafkaConfig", "parse"]

PARTITIONINGS = ("key", "single")
DELIVERIES = ("at_least_once", "exactly_once")
_SECRET_WORDS = ("password", "secret", "sasl.oauthbearer", "ssl.key")


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """A Kafka sink's options (module docstring); ``pipeline`` names the transactional
    ids and offset groups of ``exactly_once``."""

    bootstrap_servers: str
    pipeline: str = "pipeline"
    bus: BusOptions = field(default_factory=BusOptions)
    partitioning: str = "key"
    delivery: str = "at_least_once"
    tasks: int = 1
    create_topics: bool = True
    partitions: int = 3
    positions_topic: str = "headwater.positions"
    producer: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.partitioning not in PARTITIONINGS:
            raise ValueError(f"partitioning must be one of {', '.join(PARTITIONINGS)}")
        if self.delivery not in DELIVERIES:
            raise ValueError(f"delivery must be one of {', '.join(DELIVERIES)}")
        if self.tasks < 1 or self.partitions < 1:
            raise ValueError("tasks and partitions must be positive integers")
        for key, _ in self.producer:
            if any(word in key for word in _SECRET_WORDS):
                raise ValueError(f"producer setting {key!r} carries a secret; not accepted here")

    @property
    def ordering(self) -> str:
        """How the batch is split over tasks (:mod:`headwater.sinks.bus.spark`)."""
        return "global" if self.partitioning == "single" else "table"


_OWN = {
    "bootstrap_servers",
    "partitioning",
    "delivery",
    "tasks",
    "create_topics",
    "partitions",
    "positions_topic",
    "producer",
    "timeout_s",
}


def parse(section: SinkSection, context: SinkContext) -> KafkaConfig:
    """The options of a ``type: kafka`` section."""
    f = section_fields(section, BUS_FIELDS | _OWN, {"bootstrap_servers"})
    bus = bus_options(section, f)
    producer = f.pop("producer", {})
    if not isinstance(producer, dict):
        raise section.error("must map librdkafka settings to values", "producer")
    try:
        return KafkaConfig(
            pipeline=context.pipeline,
            bus=bus,
            producer=tuple((str(k), str(v)) for k, v in producer.items()),
            **f,
        )
    except (TypeError, ValueError) as e:
        raise section.error(str(e)) from None
