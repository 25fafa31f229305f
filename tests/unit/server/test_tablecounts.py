"""Rows per table between heartbeats, counted from a real change log's table lists and a
task's ``heartbeat_marks`` (``[ts_us, next seq]``), as the console's sampler does."""

from __future__ import annotations

from pathlib import Path

from headwater.position import Position
from headwater.server import TaskHandle
from headwater.server.metrics import Metrics
from headwater.server.tablecounts import Interval, TableCounts
from headwater.store import ChangeLog, Durability, Record, StoreOptions

SMALL = StoreOptions(
    segment_bytes=2048,
    memory_tail_bytes=0,
    retention_age_s=None,
    compress_after_s=None,
    durability=Durability.NONE,
)


def _append(log: ChangeLog, *tables: tuple[str, int]) -> int:
    """One record touching ``tables``; its seq."""
    seq = log.append(Record(Position(0, 1, 4 + log.next_seq), b"x" * 100, 0, "", tables))
    log.flush()
    return seq


def test_rows_between_two_heartbeats_by_table(tmp_path: Path) -> None:
    with ChangeLog.open(str(tmp_path / "log"), SMALL) as log:
        handle = TaskHandle(log=log)
        counts = TableCounts()
        _append(log, ("shop.orders", 5))  # before the first heartbeat seen: not counted
        marks = [[1_000, log.next_seq]]
        counts.update("t", handle, {"heartbeat_marks": marks})
        _append(log, ("shop.orders", 2), ("shop.items", 3))
        _append(log, ("shop.orders", 1), ("shop.*", 0), ("!create", 0))  # DDL entries: 0 rows
        marks.append([2_000, log.next_seq])
        _append(log, ("crm.people", 4))
        marks.append([3_000, log.next_seq])
        marks.append([4_000, log.next_seq])  # a heartbeat interval without rows
        counts.update("t", handle, {"heartbeat_marks": marks})
        assert counts.intervals("t") == [
            Interval(1_000, 2_000, {"shop.orders": 3, "shop.items": 3}),
            Interval(2_000, 3_000, {"crm.people": 4}),
            Interval(3_000, 4_000, {}),
        ]
        assert counts.totals() == {"t": {"shop.orders": 3, "shop.items": 3, "crm.people": 4}}
        counts.update("t", handle, {"heartbeat_marks": marks})  # nothing new: nothing changes
        assert len(counts.intervals("t")) == 3
        text = Metrics().render({"t": handle}, counts.totals()).decode()
        assert 'headwater_task_table_rows_total{task="t",table="shop.orders"} 3\n' in text
        assert 'headwater_task_table_rows_total{task="t",table="crm.people"} 4\n' in text


def test_an_interval_whose_records_are_not_readable_yet_waits(tmp_path: Path) -> None:
    """A mark can name a seq the store has not acknowledged yet (the task saw the
    heartbeat before the group commit): the interval closes at a later update."""
    with ChangeLog.open(str(tmp_path / "log"), SMALL) as log:
        handle = TaskHandle(log=log)
        counts = TableCounts()
        counts.update("t", handle, {"heartbeat_marks": [[1, log.next_seq]]})
        _append(log, ("a.b", 1))
        marks = [[1, 1], [2, log.next_seq + 1]]  # one record past the log's end
        counts.update("t", handle, {"heartbeat_marks": marks})
        assert counts.intervals("t") == []
        _append(log, ("a.b", 2))
        counts.update("t", handle, {"heartbeat_marks": marks})
        assert counts.intervals("t") == [Interval(1, 2, {"a.b": 3})]


def test_only_the_last_intervals_are_kept_and_marks_dropped_merge(tmp_path: Path) -> None:
    with ChangeLog.open(str(tmp_path / "log"), SMALL) as log:
        handle = TaskHandle(log=log)
        counts = TableCounts(keep=2)
        counts.update("t", handle, {"heartbeat_marks": [[10, log.next_seq]]})
        marks = []
        for ts in (20, 30, 40):
            _append(log, ("a.b", ts))
            marks.append([ts, log.next_seq])
        counts.update("t", handle, {"heartbeat_marks": marks})
        assert counts.intervals("t") == [
            Interval(20, 30, {"a.b": 30}),
            Interval(30, 40, {"a.b": 40}),
        ]
        assert counts.totals()["t"] == {"a.b": 90}
        _append(log, ("a.b", 1))
        _append(log, ("a.b", 2))  # the mark between these two is no longer in the status
        counts.update("t", handle, {"heartbeat_marks": [[60, log.next_seq]]})
        assert counts.intervals("t")[-1] == Interval(40, 60, {"a.b": 3})


def test_records_no_longer_retained_make_an_incomplete_interval(tmp_path: Path) -> None:
    """Retention removed the interval's first records before they were counted: the rest
    is counted from the earliest record kept, and the interval says it is incomplete."""
    options = StoreOptions(
        segment_bytes=2048,
        memory_tail_bytes=0,
        retention_age_s=None,
        retention_bytes=4096,
        compress_after_s=None,
        durability=Durability.NONE,
    )
    with ChangeLog.open(str(tmp_path / "log"), options) as log:
        handle = TaskHandle(log=log)
        counts = TableCounts()
        counts.update("t", handle, {"heartbeat_marks": [[1, log.next_seq]]})
        for _ in range(60):
            _append(log, ("a.b", 1))
        assert log.apply_retention()  # segments deleted
        earliest = log.earliest()
        assert earliest is not None and earliest.seq > 1
        kept = log.next_seq - earliest.seq
        counts.update("t", handle, {"heartbeat_marks": [[1, 1], [2, log.next_seq]]})
        assert counts.intervals("t") == [Interval(1, 2, {"a.b": kept}, complete=False)]


def test_malformed_marks_are_ignored(tmp_path: Path) -> None:
    with ChangeLog.open(str(tmp_path / "log"), SMALL) as log:
        counts = TableCounts()
        for marks in (None, "x", [[1]], [["a", 2]], [[True, 1]]):
            counts.update("t", TaskHandle(log=log), {"heartbeat_marks": marks})
        assert counts.intervals("t") == [] and counts.totals() == {}
