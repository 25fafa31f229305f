"""Snapshot modes and the entry points a pipeline runner (or the CLI) calls.

Modes (Debezium's ``snapshot.mode``):

============== =========================================================================
``initial``    snapshot the tables on the pipeline's first start (no stored position),
               then stream from the record after the snapshot
``never``      never snapshot; stream from the configured ``starting_position``
``when_needed`` snapshot when there is no stored position, or when the stored one is no
               longer retained by the change log (older than its earliest record)
``snapshot_only`` snapshot, do not stream
============== =========================================================================

The *stored position* is the pipeline's Spark checkpoint: the last offset in
``<checkpoint>/offsets/`` (``{"seq": N, ...}``). :func:`plan_snapshot` decides;
:func:`run_snapshot` runs one with the pipeline's source, transforms and sinks and returns
a :class:`~headwater.snapshot.spark.SnapshotResult` whose ``starting_position`` is where
the stream must begin; :func:`stream_config` gives the pipeline configuration that starts
there.

The source database connection is not part of the pipeline configuration (the pipeline
reads the reader's change log, not the source): callers pass it as
:class:`~headwater.sinks.base.ConnectionOptions` (the CLI's ``--source`` options).
"""

from __future__ import annotations

import dataclasses
import enum
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.errors import ConfigError
from headwater.sinks.base import ConnectionOptions
from headwater.snapshot.spark import SnapshotOptions, SnapshotResult, SnapshotRunner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from headwater.spark.pipeline_config import PipelineConfig

__all__ = [
    "SnapshotMode",
    "plan_snapshot",
    "run_snapshot",
    "stored_position",
    "stream_config",
]


class SnapshotMode(enum.StrEnum):
    INITIAL = "initial"
    NEVER = "never"
    WHEN_NEEDED = "when_needed"
    SNAPSHOT_ONLY = "snapshot_only"


def stored_position(checkpoint: str | Path) -> int | None:
    """The record seq the pipeline's Spark checkpoint resumes at (None: no batch yet)."""
    offsets = Path(checkpoint) / "offsets"
    if not offsets.is_dir():
        return None
    batches = sorted((int(p.name) for p in offsets.iterdir() if p.name.isdigit()), reverse=True)
    for batch in batches:
        for line in reversed((offsets / str(batch)).read_text(encoding="utf-8").splitlines()):
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(doc, dict) and "seq" in doc:
                return int(doc["seq"])
    return None


def _earliest_seq(task_dir: str | Path) -> int | None:
    from headwater.store import ChangeLog

    log = ChangeLog.open(str(Path(task_dir) / "changes"), read_only=True)
    try:
        first = log.earliest()
    finally:
        log.close()
    return None if first is None else first.seq


def plan_snapshot(mode: str, *, checkpoint: str | Path, task_dir: str | Path) -> bool:
    """Whether ``mode`` calls for a snapshot now (module docstring)."""
    try:
        m = SnapshotMode(mode)
    except ValueError:
        raise ConfigError(
            f"expected one of {', '.join(x.value for x in SnapshotMode)}, got {mode!r}",
            field="mode",
        ) from None
    if m is SnapshotMode.NEVER:
        return False
    if m is SnapshotMode.SNAPSHOT_ONLY:
        return True
    stored = stored_position(checkpoint)
    if m is SnapshotMode.INITIAL:
        return stored is None
    if stored is None:
        return True
    earliest = _earliest_seq(task_dir)
    return earliest is not None and stored < earliest


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
    connection: ConnectionOptions,
    tables: str | list[str],
    state_path: str | Path | None = None,
    options: SnapshotOptions | None = None,
    sinks: list[Any] | None = None,
) -> SnapshotResult:
    """Snapshot ``tables`` into the pipeline's sinks through its transforms. The state
    file defaults to ``<checkpoint>/snapshot.json`` (a finished snapshot of other tables
    there is replaced; an unfinished one must be finished first)."""
    from headwater.spark.runner import build_sink

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
