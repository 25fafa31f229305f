"""Parquet sinks: the append-only change log and the table mirror."""

from __future__ import annotations

from headwater.sinks.files.changelog import ParquetChangeLog
from headwater.sinks.files.configuration import MirrorConfig, ParquetLogConfig
from headwater.sinks.files.mirror import ParquetMirror

__all__ = ["MirrorConfig", "ParquetChangeLog", "ParquetLogConfig", "ParquetMirror"]
