"""The PostgreSQL sink: capabilities (data) and the sink class."""

from __future__ import annotations

from headwater.sinks.base import DdlMode, SinkCapabilities
from headwater.sinks.postgres.client import PostgresDialect
from headwater.sinks.postgres.configuration import PostgresSinkConfig
from headwater.sinks.sql import SqlSink

__all__ = ["CAPABILITIES", "PostgresSink"]

CAPABILITIES = SinkCapabilities(
    name="postgres",
    transactional=True,
    applies_ddl=True,
    ddl_modes=frozenset(DdlMode),
    max_params=65_535,
    zero_dates=frozenset({"null", "fail"}),
)
PostgresDialect.capabilities = CAPABILITIES


class PostgresSink(SqlSink):
    """Exactly-once sink into PostgreSQL (see :mod:`headwater.sinks.sql`)."""

    dialect = PostgresDialect()
    config: PostgresSinkConfig

    def __init__(self, config: PostgresSinkConfig) -> None:
        super().__init__(config)
