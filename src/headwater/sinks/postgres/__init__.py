"""PostgreSQL sink: ``configuration`` (options), ``client`` (dialect, types), ``factory``."""

from __future__ import annotations

from headwater.sinks.postgres.configuration import PostgresSinkConfig
from headwater.sinks.postgres.factory import CAPABILITIES, PostgresSink

__all__ = ["CAPABILITIES", "PostgresSink", "PostgresSinkConfig"]
