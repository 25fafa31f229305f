"""Snapshots run by a pipeline: its source, transforms and sinks, and where the stream
starts after them.

:func:`run_snapshot` runs one (:class:`~headwater.snapshot.runner.SnapshotRunner`) into
the pipeline's sinks through its transforms and returns a
:class:`~headwater.snapshot.runner.SnapshotResult` whose ``starting_position`` is where the
stream must begin; :func:`stream_config` gives the pipeline configuration that starts
there. Whether to snapshot at all is :func:`headwater.snapshot.modes.plan_snapshot`.

The source database connection is not part of the pipeline's source section (the
pipeline reads the reader's change log, not the source): callers pass it as a
:class:`~headwater.connections.SourceConnection` (the CLI's ``--source`` options, or the
file's ``snapshot`` section for re-snapshots).

The change log is read where the pipeline's source reads it (:func:`snapshot_log`): the
task directory of a ``path:`` source, or, for a ``server:`` source, the reader's HTTP API,
so that snapshots run on a cluster whose executors see no reader directory
(docs/cluster.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.connections import SourceConnection
from headwater.pipeline.config import PipelineConfig
from headwater.pipeline.sinks import build_sink
from headwater.snapshot.changelog import LogRef
from headwater.snapshot.runner import SnapshotOptions, SnapshotResult, SnapshotRunner
from headwater.spark.offsets import parse_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["run_snapshot", "snapshot_log", "stream_config"]


def snapshot_log(config: PipelineConfig) -> LogRef:
    """Where the pipeline's snapshots read the change log: its source's task directory
    (``path:``) or the reader's HTTP API (``server:`` and ``task``, with the token read
    here on the driver from ``tokenEnv``/``tokenFile``; it travels inside the chunk tasks)."""
    return LogRef.of(parse_options(config.source.option_map()))


def _source_name(config: PipelineConfig) -> str:
    return parse_options(config.source.option_map()).source_name


def run_snapshot(
    spark: SparkSession,
    config: PipelineConfig,
    *,
    connection: SourceConnection,
    tables: str | list[str],
    state_path: str | Path | None = None,
    options: SnapshotOptions | None = None,
    sinks: list[Any] | None = None,
) -> SnapshotResult:
    """Snapshot ``tables`` into the pipeline's sinks through its transforms. The state
    file defaults to ``<checkpoint>/snapshot.json`` (a finished snapshot of other tables
    there is replaced; an unfinished one must be finished first)."""
    state = Path(state_path) if state_path else config.checkpoint / "snapshot.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    runner = SnapshotRunner(
        spark,
        source=_source_name(config),
        log=snapshot_log(config),
        connection=connection,
        tables=tables,
        state_path=state,
        sinks=sinks if sinks is not None else [build_sink(s, config) for s in config.sinks],
        transforms=config.transforms,
        options=options,
    )
    return runner.run()


def stream_config(config: PipelineConfig, result: SnapshotResult) -> PipelineConfig:
    """``config`` with ``startingPosition`` at the record after the snapshot."""
    opts = [(k, v) for k, v in config.source.options if k.lower() != "startingposition"]
    opts.append(("startingPosition", result.starting_position))
    return dataclasses.replace(
        config, source=dataclasses.replace(config.source, options=tuple(opts))
    )
