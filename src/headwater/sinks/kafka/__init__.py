"""Kafka sink: changes as messages in Kafka topics, written from the executors with
confluent-kafka (``configuration``: options and the pipeline-file section; ``factory``:
capabilities and the sink class; ``producer``: the executor side)."""

from __future__ import annotations

from headwater.sinks.kafka.configuration import KafkaConfig
from headwater.sinks.kafka.factory import CAPABILITIES, KafkaSink

__all__ = ["CAPABILITIES", "KafkaConfig", "KafkaSink"]
