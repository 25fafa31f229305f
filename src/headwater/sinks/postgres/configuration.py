"""Options of the PostgreSQL sink: :class:`PostgresSinkConfig`.

The fields of every SQL sink (:class:`headwater.sinks.sql.SqlSinkConfig`). A source
database maps to a PostgreSQL *schema* in the database named by
``connection.database`` (``database_map`` renames it). Schema changes are derived from
the source's table definitions, never translated from MySQL text (``ddl``: ``lenient``
by default, ``evolve``, ``ignore``, ``fail``). Zero dates have no PostgreSQL value:
``zero_dates`` is ``null`` (default) or ``fail``.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.sinks.base import DdlMode
from headwater.sinks.dialect import SqlSinkConfig
from headwater.sinks.section import SinkContext, SinkSection, parse_fields

__all__ = ["PostgresSinkConfig", "parse"]


@dataclass(frozen=True, slots=True)
class PostgresSinkConfig(SqlSinkConfig):
    """:class:`SqlSinkConfig` with PostgreSQL defaults (``ddl: lenient``, ``zero_dates: null``)."""

    ddl: DdlMode = DdlMode.LENIENT
    zero_dates: str = "null"


def parse(section: SinkSection, context: SinkContext) -> PostgresSinkConfig:
    """The options of a pipeline file's ``type: postgres`` section (fields by their declared
    types, :func:`~headwater.sinks.section.parse_fields`)."""
    return parse_fields(section, PostgresSinkConfig, context)
