"""The Parquet sinks: capabilities (data) and sink classes."""

from __future__ import annotations

from headwater.sinks.base import DdlMode, SinkCapabilities
from headwater.sinks.files.changelog import ParquetChangeLog
from headwater.sinks.files.mirror import ParquetMirror

__all__ = [
    "CAPABILITIES",
    "LOG_CAPABILITIES",
    "MIRROR_CAPABILITIES",
    "ParquetChangeLog",
    "ParquetMirror",
]

#: The change log keeps DDL rows as rows (``fail`` stops at them); replays replace a
#: batch's files (idempotent).
LOG_CAPABILITIES = SinkCapabilities(
    name="parquet_log",
    transactional=False,
    applies_ddl=False,
    ddl_modes=frozenset(DdlMode),
    zero_dates=frozenset({"keep"}),
    ordering="none",
    shared_dir="path",
)
#: The mirror applies schema changes to its files (headwater.sinks.files.evolve).
MIRROR_CAPABILITIES = SinkCapabilities(
    name="parquet_mirror",
    transactional=False,
    applies_ddl=True,
    ddl_modes=frozenset(DdlMode),
    zero_dates=frozenset({"null"}),
    shared_dir="path",
)
CAPABILITIES = LOG_CAPABILITIES
