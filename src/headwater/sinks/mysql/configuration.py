"""Options of the MySQL/MariaDB sink: :class:`MysqlSinkConfig`.

The same fields as every SQL sink (:class:`headwater.sinks.sql.SqlSinkConfig`), with the
defaults a MySQL target wants: schema changes are applied leniently (``ddl: lenient``;
:class:`~headwater.sinks.base.DdlMode`), and zero dates are kept as the zero literal (the
session clears ``NO_ZERO_DATE`` and ``NO_ZERO_IN_DATE`` from its ``sql_mode`` so the server
accepts them).
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.sinks.base import DdlMode
from headwater.sinks.dialect import SqlSinkConfig
from headwater.sinks.section import SinkContext, SinkSection, parse_fields

__all__ = ["MysqlSinkConfig", "parse"]


@dataclass(frozen=True, slots=True)
class MysqlSinkConfig(SqlSinkConfig):
    """:class:`SqlSinkConfig` with MySQL defaults (``ddl: lenient``, ``zero_dates: keep``)."""

    ddl: DdlMode = DdlMode.LENIENT
    zero_dates: str = "keep"


def parse(section: SinkSection, context: SinkContext) -> MysqlSinkConfig:
    """The options of a pipeline file's ``type: mysql`` section (fields by their declared
    types, :func:`~headwater.sinks.section.parse_fields`)."""
    return parse_fields(section, MysqlSinkConfig, context)
