"""The MySQL/MariaDB sink: capabilities (data) and the sink class."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.sinks.base import DdlMode, Renames, SinkCapabilities
from headwater.sinks.mysql.client import MysqlDialect
from headwater.sinks.mysql.configuration import MysqlSinkConfig
from headwater.sinks.sql import SqlSink

if TYPE_CHECKING:
    from headwater.sinks.mysql.bulk import BulkTarget

__all__ = ["CAPABILITIES", "MysqlSink"]

CAPABILITIES = SinkCapabilities(
    name="mysql",
    transactional=True,
    applies_ddl=True,
    ddl_modes=frozenset(DdlMode),
    max_params=65_535,
    zero_dates=frozenset({"keep", "null", "fail"}),
    bulk_load=True,
)
MysqlDialect.capabilities = CAPABILITIES


class MysqlSink(SqlSink):
    """Exactly-once sink into MySQL or MariaDB (see :mod:`headwater.sinks.sql`)."""

    dialect = MysqlDialect()
    config: MysqlSinkConfig

    def __init__(self, config: MysqlSinkConfig) -> None:
        super().__init__(config)

    def bulk_load(self, renames: Renames) -> BulkTarget | None:
        """The bulk-load capability behind name-only transforms ``renames``
        (:mod:`headwater.sinks.mysql.bulk`); None unless zero dates are kept (the bulk
        text keeps them as they are)."""
        from headwater.sinks.mysql.bulk import BulkTarget

        if self.config.zero_dates != "keep":
            return None
        return BulkTarget(self.config, renames)
