"""Options of the Parquet sinks: :class:`ParquetLogConfig`, :class:`MirrorConfig`.

Paths are local (or shared POSIX) directories: publishing relies on ``os.replace`` being
atomic within one file system.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.sinks.base import SchemaSource
from headwater.sinks.section import SinkContext, SinkSection, parse_fields

__all__ = ["MirrorConfig", "ParquetLogConfig", "parse_log", "parse_mirror"]


@dataclass(frozen=True, slots=True)
class ParquetLogConfig:
    """The append-only change log: ``path`` is its root directory."""

    path: str


@dataclass(frozen=True, slots=True)
class MirrorConfig:
    """The current state of each table as Parquet under ``path``.

    Rows are spread over mirror partitions: by ``partition_column``'s value when set, else
    by ``buckets`` hash buckets of the primary key. ``shards`` is how many Spark tasks
    rewrite partitions in parallel. Needs FULL row images when ``partition_column`` is set
    (the column must be in every image).
    """

    path: str
    schema: SchemaSource
    buckets: int = 8
    partition_column: str | None = None
    shards: int = 2


def parse_log(section: SinkSection, context: SinkContext) -> ParquetLogConfig:
    """The options of a ``type: parquet_log`` section."""
    return parse_fields(section, ParquetLogConfig, context)


def parse_mirror(section: SinkSection, context: SinkContext) -> MirrorConfig:
    """The options of a ``type: parquet_mirror`` section (``schema_file``: see
    :func:`~headwater.sinks.section.parse_fields`)."""
    return parse_fields(section, MirrorConfig, context)
