"""Snapshots (full pulls) of source tables, consistent with the change log, run on Spark.

Tables are split by key into chunks (:mod:`~headwater.snapshot.chunking`); each chunk is
read by a Spark task between a low and a high watermark and reconciled with the change
log's window (:mod:`~headwater.snapshot.watermarks`, :mod:`~headwater.snapshot.reader`);
waves of chunks go through the pipeline's transforms to its sinks with sequences that
interleave with the stream (:mod:`~headwater.snapshot.spark`); a JSON state file makes a
snapshot resumable at chunk granularity (:mod:`~headwater.snapshot.state`). Into
MySQL/MariaDB sinks behind rename-only transforms, chunks take the bulk path
(:mod:`~headwater.snapshot.bulk`: the servers format and load the rows, only the window's
changes become change rows). Modes and entry points: :mod:`~headwater.snapshot.run`;
signal-table triggers: :mod:`~headwater.snapshot.signals`. User documentation:
docs/configuration.md, "Snapshots"; docs/operations.md, "Snapshots".
"""

from headwater.snapshot.run import SnapshotMode, plan_snapshot, run_snapshot, stream_config
from headwater.snapshot.signals import SnapshotRequest, watch_signals
from headwater.snapshot.spark import SnapshotOptions, SnapshotResult, SnapshotRunner

__all__ = [
    "SnapshotMode",
    "SnapshotOptions",
    "SnapshotRequest",
    "SnapshotResult",
    "SnapshotRunner",
    "plan_snapshot",
    "run_snapshot",
    "stream_config",
    "watch_signals",
]
