"""Snapshots (full pulls) of source tables, consistent with the change log, run on Spark.

Tables are split by key into chunks (:mod:`~headwater.snapshot.chunking`); each chunk is
read by a Spark task between a low and a high watermark and reconciled with the change
log's window (:mod:`~headwater.snapshot.watermarks`, :mod:`~headwater.snapshot.chunks`),
read from the reader's task directory or its HTTP API (:mod:`~headwater.snapshot.changelog`);
waves of chunks go through the pipeline's transforms to its sinks with sequences that
interleave with the stream (:mod:`~headwater.snapshot.runner`); a JSON state file makes a
snapshot resumable at chunk granularity (:mod:`~headwater.snapshot.state`). Into
MySQL/MariaDB sinks behind rename-only transforms, chunks take the bulk path
(:mod:`~headwater.snapshot.bulk`: the servers format and load the rows, only the window's
changes become change rows). Modes: :mod:`~headwater.snapshot.modes`; signal-table
triggers: :mod:`~headwater.snapshot.signals`. A pipeline runs snapshots into its sinks
with :mod:`headwater.pipeline.snapshots`. User documentation:
docs/configuration.md, "Snapshots"; docs/operations.md, "Snapshots".
"""

from headwater.snapshot.modes import SnapshotMode, plan_snapshot
from headwater.snapshot.runner import SnapshotOptions, SnapshotResult, SnapshotRunner
from headwater.snapshot.signals import SnapshotRequest, watch_signals

__all__ = [
    "SnapshotMode",
    "SnapshotOptions",
    "SnapshotRequest",
    "SnapshotResult",
    "SnapshotRunner",
    "plan_snapshot",
    "watch_signals",
]
