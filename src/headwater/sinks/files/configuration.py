"""Options of the Parquet sinks: :class:`ParquetLogConfig`, :class:`MirrorConfig`.

A ``path`` is a local or shared POSIX directory or a URI of a Hadoop-style store
(``file://``, ``hdfs://``, ``s3a://``): :mod:`headwater.sinks.files.fs` publishes through
it and says what is atomic on which store.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.sinks.base import DdlMode, SchemaSource
from headwater.sinks.section import SinkContext, SinkSection, parse_fields

__all__ = ["MirrorConfig", "ParquetLogConfig", "parse_log", "parse_mirror"]


@dataclass(frozen=True, slots=True)
class ParquetLogConfig:
    """The append-only change log: ``path`` is its root directory.

    ``ddl`` (:class:`~headwater.sinks.base.DdlMode`): the log's file schema is the
    change-row schema whatever the DDL (images are JSON text), so every mode but ``fail``
    writes DDL rows as rows; ``fail`` stops at the first schema change about data.
    """

    path: str
    ddl: DdlMode = DdlMode.LENIENT


@dataclass(frozen=True, slots=True)
class MirrorConfig:
    """The current state of each table as Parquet under ``path``.

    Rows are spread over mirror partitions: by ``partition_column``'s value when set, else
    by ``buckets`` hash buckets of the primary key. ``shards`` is how many Spark tasks
    rewrite partitions in parallel. Needs FULL row images when ``partition_column`` is set
    (the column must be in every image). ``ddl``: what a schema change of the source
    does to the files (:mod:`headwater.sinks.files.evolve`).
    """

    path: str
    schema: SchemaSource
    buckets: int = 8
    partition_column: str | None = None
    shards: int = 2
    ddl: DdlMode = DdlMode.LENIENT


def parse_log(section: SinkSection, context: SinkContext) -> ParquetLogConfig:
    """The options of a ``type: parquet_log`` section."""
    return parse_fields(section, ParquetLogConfig, context)


def parse_mirror(section: SinkSection, context: SinkContext) -> MirrorConfig:
    """The options of a ``type: parquet_mirror`` section (``schema_file``: see
    :func:`~headwater.sinks.section.parse_fields`)."""
    return parse_fields(section, MirrorConfig, context)
