"""Sinks: where a pipeline's changes end up (DESIGN.md, decisions 5 and 6).

Each kind of sink is a small folder (``mysql/``, ``postgres/``, ``files/``): its options
(``configuration.py``), its client or writer, and ``factory.py`` with its capabilities as
data. They share a small interface, :class:`Sink`::

    sink = create_sink("postgres", pipeline="orders-to-pg",
                       connection=ConnectionOptions(host="pg", port=5432, user="hw",
                                                    password_env="PG_PASSWORD",
                                                    database="warehouse"),
                       schema=SchemaFile("/var/lib/headwater/orders/schema.jsonl"))
    query = changes.writeStream.foreachBatch(sink.write_batch).start()

``write_batch(df, batch_id)`` is the ``foreachBatch`` body; SQL sinks also have
``apply_changes(rows, batch_id, shard)``, the same without Spark. Sinks are plain
picklable configuration: executors open their own connections. Drivers (pymysql,
psycopg, pyarrow, pyspark) are imported only when a sink runs.

:data:`SINKS` lists the kinds by name; :func:`sink_factory` loads one lazily.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from headwater.errors import ConfigError
from headwater.sinks.base import (
    ApplyResult,
    ConnectionOptions,
    DdlMode,
    RetryPolicy,
    SchemaFile,
    SchemaSource,
    Sink,
    SinkCapabilities,
    StaticSchema,
)

__all__ = [
    "SINKS",
    "ApplyResult",
    "ConnectionOptions",
    "DdlMode",
    "RetryPolicy",
    "SchemaFile",
    "SchemaSource",
    "Sink",
    "SinkCapabilities",
    "SinkFactory",
    "StaticSchema",
    "create_sink",
    "sink_factory",
]


@dataclass(frozen=True, slots=True)
class SinkFactory:
    """One kind of sink, by module path (nothing is imported until :meth:`load`)."""

    name: str
    module: str
    sink_class: str
    config_class: str
    capabilities_attr: str = "CAPABILITIES"

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


#: Every kind of sink, by the name configurations use.
SINKS: dict[str, SinkFactory] = {
    f.name: f
    for f in (
        SinkFactory("mysql", "headwater.sinks.mysql", "MysqlSink", "MysqlSinkConfig"),
        SinkFactory("postgres", "headwater.sinks.postgres", "PostgresSink", "PostgresSinkConfig"),
        SinkFactory("parquet_log", "headwater.sinks.files", "ParquetChangeLog", "ParquetLogConfig"),
        SinkFactory(
            "parquet_mirror",
            "headwater.sinks.files",
            "ParquetMirror",
            "MirrorConfig",
            "MIRROR_CAPABILITIES",
        ),
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
