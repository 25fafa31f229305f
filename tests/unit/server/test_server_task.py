"""TaskHandle: the reader service's status plugs in as a dict or a callable."""

from __future__ import annotations

from pathlib import Path

from headwater.position import Position
from headwater.server import TaskHandle
from headwater.store import ChangeLog, Record


def test_status_accepts_the_reader_tasks_lag_s_name() -> None:
    handle = TaskHandle(log="unused", status=lambda: {"lag_s": 1.5, "state": "running"})
    assert handle.status_dict() == {"lag_s": 1.5, "lag_seconds": 1.5, "state": "running"}
    assert TaskHandle(log="unused", status={"lag_seconds": 2.0}).status_dict()["lag_seconds"] == 2.0


def test_a_directory_is_opened_read_only_once_and_closed(tmp_path: Path) -> None:
    with ChangeLog.open(str(tmp_path)) as writer:
        writer.append(Record(Position(0, 1, 4), b"x"))
        handle = TaskHandle(log=tmp_path, fde=lambda: None)
        opened = handle.change_log()
        assert opened is handle.change_log() and opened is not writer
        latest = opened.latest()
        assert latest is not None and latest.seq == 1
        handle.close()
        assert opened.closed and handle.format_description() is None
