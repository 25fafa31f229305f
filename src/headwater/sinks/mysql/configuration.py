"""Options of the MySQL/MariaDB sink: :class:`MysqlSinkConfig`.

The same fields as every SQL sink (:class:`headwater.sinks.sql.SqlSinkConfig`), with the
defaults a MySQL target wants: DDL of the source is applied (it is MySQL's own dialect),
and zero dates are kept as the zero literal (the session clears ``NO_ZERO_DATE`` and
``NO_ZERO_IN_DATE`` from its ``sql_mode`` so the server accepts them).
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.sinks.base import DdlMode
from headwater.sinks.dialect import SqlSinkConfig

__all__ = ["MysqlSinkConfig"]


@dataclass(frozen=True, slots=True)
class MysqlSinkConfig(SqlSinkConfig):
    """:class:`SqlSinkConfig` with MySQL defaults (``ddl: apply``, ``zero_dates: keep``)."""

    ddl: DdlMode = DdlMode.APPLY
    zero_dates: str = "keep"
