"""A snapshot chunk's error that a retry cannot fix comes back as data (issue #16): the
Spark task succeeds (no retries, no repeated side effects) and the driver raises it."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.connections import SourceConnection
from headwater.errors import StoreError
from headwater.sinks.failfast import Failed
from headwater.snapshot.changelog import LogRef
from headwater.snapshot.chunks import ChunkTask
from headwater.snapshot.keys import KeyOrder
from headwater.snapshot.runner import _chunk_items, _raise_failed


def task(log: LogRef) -> ChunkTask:
    return ChunkTask(
        "c1", "src", log, SourceConnection(port=1), "db", "t", KeyOrder(()), None, None, 1
    )


def test_a_terminal_error_of_a_chunk_is_one_failed_item(tmp_path: Path) -> None:
    items = list(_chunk_items([task(LogRef(task_dir=str(tmp_path / "no-task")))]))
    assert len(items) == 1
    kind, failed = items[0]
    assert kind == "failed" and isinstance(failed, Failed)
    error = failed.exception()
    assert isinstance(error, StoreError) and "no change log here" in str(error)
    with pytest.raises(StoreError, match="no change log here"):
        _raise_failed([failed])
    _raise_failed([])  # nothing failed: nothing raised
