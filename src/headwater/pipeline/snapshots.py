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
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.connections import SourceConnection
from headwater.errors import ConfigError
from headwater.pipeline.config import PipelineConfig
from headwater.pipeline.sinks import build_sink
from headwater.snapshot.runner import SnapshotOptions, SnapshotResult, SnapshotRunner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["run_snapshot", "stream_config"]


def _task_dir(config: PipelineConfig) -> str:
    opts = config.source.option_map()
    path = opts.get("path")
    if not path:
        raise ConfigError(
            "snapshots read the reader task directory: the pipeline's source needs a path",
            field="source.path",
        )
    return path


def _source_name(config: PipelineConfig) -> str:
    opts = config.source.option_map()
    return (
        opts.get("source")
        or opts.get("task")
        or os.path.basename(os.path.normpath(_task_dir(config)))
    )


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
        task_dir=_task_dir(config),
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
