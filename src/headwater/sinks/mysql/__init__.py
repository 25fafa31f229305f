"""MySQL/MariaDB sink: ``configuration`` (options), ``client`` (dialect), ``factory``."""

from __future__ import annotations

from headwater.sinks.mysql.configuration import MysqlSinkConfig
from headwater.sinks.mysql.factory import CAPABILITIES, MysqlSink

__all__ = ["CAPABILITIES", "MysqlSink", "MysqlSinkConfig"]
