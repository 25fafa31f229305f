"""Snapshot modes: whether a pipeline snapshots its tables before it streams.

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
:func:`headwater.pipeline.snapshots.run_snapshot` runs one with the pipeline's source,
transforms and sinks.
"""

from __future__ import annotations

import enum
from pathlib import Path

import orjson

from headwater.errors import ConfigError
from headwater.snapshot.changelog import LogRef, open_snapshot_log

__all__ = ["SnapshotMode", "plan_snapshot", "stored_position"]


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


def _earliest_seq(log: LogRef | str | Path) -> int | None:
    opened = open_snapshot_log(log)
    try:
        return opened.earliest_seq()
    finally:
        opened.close()


def plan_snapshot(mode: str, *, checkpoint: str | Path, log: LogRef | str | Path) -> bool:
    """Whether ``mode`` calls for a snapshot now (module docstring). ``log``: the reader
    task's change log (:class:`~headwater.snapshot.changelog.LogRef`; a path is a task
    directory), read only by ``when_needed`` with a stored position."""
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
    earliest = _earliest_seq(log)
    return earliest is not None and stored < earliest
