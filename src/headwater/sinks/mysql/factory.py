"""The MySQL/MariaDB sink: capabilities (data) and the sink class."""

from __future__ import annotations

from headwater.sinks.base import DdlMode, SinkCapabilities
from headwater.sinks.mysql.client import MysqlDialect
from headwater.sinks.mysql.configuration import MysqlSinkConfig
from headwater.sinks.sql import SqlSink

__all__ = ["CAPABILITIES", "MysqlSink"]

CAPABILITIES = SinkCapabilities(
    name="mysql",
    transactional=True,
    applies_ddl=True,
    ddl_modes=frozenset(DdlMode),
    max_params=65_535,
    zero_dates=frozenset({"keep", "null", "fail"}),
)
MysqlDialect.capabilities = CAPABILITIES


class MysqlSink(SqlSink):
    """Exactly-once sink into MySQL or MariaDB (see :mod:`headwater.sinks.sql`)."""

    dialect = MysqlDialect()
    config: MysqlSinkConfig

    def __init__(self, config: MysqlSinkConfig) -> None:
        super().__init__(config)
