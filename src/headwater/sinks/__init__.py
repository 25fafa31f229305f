"""Sinks: where a pipeline's changes end up (DESIGN.md, decisions 5 and 6).

Each kind of sink is a small folder (``mysql/``, ``postgres/``, ``files/``, ``ums/``): its
options and the parsing of its pipeline-file section (``configuration.py``: a ``parse``
function, :mod:`headwater.sinks.section`), its client or writer, and ``factory.py`` with its
capabilities as data. They share a small interface, :class:`Sink`::

    sink = create_sink("postgres", pipeline="orders-to-pg",
                       connection=TargetConnection(host="pg", port=5432, user="hw",
                                                   password_env="PG_PASSWORD",
                                                   database="warehouse"),
                       schema=SchemaFile("/var/lib/headwater/orders/schema.jsonl"))
    query = changes.writeStream.foreachBatch(sink.write_batch).start()

``write_batch(df, batch_id)`` is the ``foreachBatch`` body; SQL sinks also have
``apply_changes(rows, batch_id, shard)``, the same without Spark. Sinks are plain
picklable configuration: executors open their own connections. Drivers (pymysql,
psycopg, pyarrow, pyspark) are imported only when a sink runs.

:data:`SINKS` lists the kinds by name; :func:`sink_factory` loads one lazily. Adding a
kind of sink is one folder plus one line in :data:`SINKS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from headwater.connections import TargetConnection
from headwater.errors import ConfigError
from headwater.sinks.base import (
    ApplyResult,
    DdlMode,
    RetryPolicy,
    SchemaFile,
    SchemaSource,
    Sink,
    SinkCapabilities,
    StaticSchema,
)
from headwater.sinks.section import SinkContext, SinkSection

__all__ = [
    "SINKS",
    "ApplyResult",
    "DdlMode",
    "RetryPolicy",
    "SchemaFile",
    "SchemaSource",
    "Sink",
    "SinkCapabilities",
    "SinkContext",
    "SinkFactory",
    "SinkSection",
    "StaticSchema",
    "TargetConnection",
    "create_sink",
    "sink_factory",
]


@dataclass(frozen=True, slots=True)
class SinkFactory:
    """One kind of sink, by module path (nothing is imported until :meth:`load`):
    ``module``'s ``factory.py`` holds ``sink_class`` and the capabilities
    (``capabilities_attr``), its ``configuration.py`` holds ``config_class`` and the
    function ``parser`` that builds one from a pipeline file's section."""

    name: str
    module: str
    sink_class: str
    config_class: str
    capabilities_attr: str = "CAPABILITIES"
    parser: str = "parse"

    def load(self) -> tuple[type[Any], type[Any], SinkCapabilities]:
        """``(sink class, config class, capabilities)``."""
        factory = importlib.import_module(f"{self.module}.factory")
        config = importlib.import_module(f"{self.module}.configuration")
        return (
            getattr(factory, self.sink_class),
            getattr(config, self.config_class),
            getattr(factory, self.capabilities_attr),
        )

    @property
    def capabilities(self) -> SinkCapabilities:
        return self.load()[2]

    def build(self, section: SinkSection, context: SinkContext) -> Any:
        """The sink of one pipeline-file section (ConfigError names the field)."""
        sink_class, _, _ = self.load()
        parse = getattr(importlib.import_module(f"{self.module}.configuration"), self.parser)
        return sink_class(parse(section, context))


#: Every kind of sink, by the name configurations use.
SINKS: dict[str, SinkFactory] = {
    f.name: f
    for f in (
        SinkFactory("mysql", "headwater.sinks.mysql", "MysqlSink", "MysqlSinkConfig"),
        SinkFactory("postgres", "headwater.sinks.postgres", "PostgresSink", "PostgresSinkConfig"),
        SinkFactory(
            "parquet_log",
            "headwater.sinks.files",
            "ParquetChangeLog",
            "ParquetLogConfig",
            "LOG_CAPABILITIES",
            "parse_log",
        ),
        SinkFactory(
            "parquet_mirror",
            "headwater.sinks.files",
            "ParquetMirror",
            "MirrorConfig",
            "MIRROR_CAPABILITIES",
            "parse_mirror",
        ),
        SinkFactory("ums", "headwater.sinks.ums", "UmsFileSink", "UmsConfig"),
        SinkFactory("kafka", "headwater.sinks.kafka", "KafkaSink", "KafkaConfig"),
        SinkFactory("nats", "headwater.sinks.nats", "NatsSink", "NatsConfig"),
        SinkFactory("redis", "headwater.sinks.redis", "RedisSink", "RedisConfig"),
    )
}


def sink_factory(name: str) -> SinkFactory:
    """The factory of sink kind ``name``; :class:`ConfigError` names the known kinds."""
    try:
        return SINKS[name]
    except KeyError:
        raise ConfigError(f"unknown sink {name!r}; known: {sorted(SINKS)}", field="sink") from None


def create_sink(name: str, **options: Any) -> Sink:
    """A sink of kind ``name`` configured with ``options`` (its config class's fields)."""
    sink_class, config_class, _ = sink_factory(name).load()
    sink: Sink = sink_class(config_class(**options))
    return sink
