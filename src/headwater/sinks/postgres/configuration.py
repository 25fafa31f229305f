"""Options of the PostgreSQL sink: :class:`PostgresSinkConfig`.

The fields of every SQL sink (:class:`headwater.sinks.sql.SqlSinkConfig`). A source
database maps to a PostgreSQL *schema* in the database named by
``connection.database`` (``database_map`` renames it). MySQL DDL is not translated:
``ddl`` is ``skip`` (default) or ``fail``. Zero dates have no PostgreSQL value:
``zero_dates`` is ``null`` (default) or ``fail``.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.sinks.base import DdlMode
from headwater.sinks.dialect import SqlSinkConfig

__all__ = ["PostgresSinkConfig"]


@dataclass(frozen=True, slots=True)
class PostgresSinkConfig(SqlSinkConfig):
    """:class:`SqlSinkConfig` with PostgreSQL defaults (``ddl: skip``, ``zero_dates: null``)."""

    ddl: DdlMode = DdlMode.SKIP
    zero_dates: str = "null"
