"""Rows per table between consecutive heartbeats of each task (DBUS's statistic).

A reader task with a heartbeat marks, in its status, each heartbeat that went through its
stream: ``heartbeat_marks``, ``[ts_us, seq]`` pairs (``headwater.reader.heartbeat``): the
heartbeat's time and the change log's next seq then, so the records of seqs
``[seq_a, seq_b)`` are those between two heartbeats ``a`` and ``b``. Every record carries
its table list, ``(db.table, rows)`` (``headwater.store.record``); :class:`TableCounts`
sums them per interval, reading the records as any consumer does, with the console's
sampler: in a fetch worker process when the server has them (``FetchPool.run``: its
nice'd processes, never the capture thread's interpreter lock), in the sampler's thread
otherwise. Nothing is counted on the capture path.

Per task it keeps the last ``keep`` intervals (start and end heartbeat times, rows per
table) and the totals per table since this server began counting (the counter
``headwater_task_table_rows_total{task,table}`` on ``/metrics``). Counting starts at the
first heartbeat the server sees (rows before it belong to no interval). An interval whose
records were no longer retained when counted is kept with ``complete`` False. A count
bounded by ``budget_s`` goes on at the next sample, so a busy task's counts come late but
exact. DDL entries of the table lists (0 rows, ``db.*``, ``!kind``) are not counted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from headwater.errors import PositionNotRetainedError, StoreError
from headwater.server import TaskHandle
from headwater.store import AtSeq, ChangeLog

if TYPE_CHECKING:
    from headwater.server.workers import FetchPool

__all__ = ["Interval", "TableCounts", "count_rows"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Interval:
    """Rows per table committed between two heartbeats (their times, microseconds)."""

    start_us: int
    end_us: int
    rows: dict[str, int]
    complete: bool = True


def count_rows(
    changelog: ChangeLog, first: int, end: int, deadline: float
) -> tuple[dict[str, int], int, bool]:
    """Rows per table of the records ``[first, end)`` of ``changelog``, read until
    ``time.monotonic()`` passes ``deadline`` or no more is readable yet: ``(rows, the
    next seq to count, complete)``; ``complete`` is False when records were no longer
    retained (counting goes on from the earliest one) or could not be read (skipped)."""
    rows: dict[str, int] = {}
    complete = True
    seq = first
    while seq < end:
        try:
            with changelog.reader(AtSeq(seq)) as reader:
                while seq < end:
                    record = reader.next(timeout=0)
                    if record is None:
                        return rows, seq, complete  # not acknowledged yet: next sample
                    for table, n in record.tables:
                        if n:
                            rows[table] = rows.get(table, 0) + n
                    seq = record.seq + 1
                    if time.monotonic() > deadline:
                        return rows, seq, complete
        except PositionNotRetainedError:
            earliest = changelog.earliest()
            complete = False
            if earliest is None or earliest.seq <= seq:
                return rows, end, complete
            seq = earliest.seq
        except StoreError as e:  # a damaged record: the interval is skipped, not retried
            log.warning("table counts: records %d..%d not read: %s", seq, end - 1, e)
            return rows, end, False
    return rows, seq, complete


# --- in a fetch worker process ---------------------------------------------------------------

_handles: dict[str, TaskHandle] = {}


def _count_in_worker(
    log_dir: str, first: int, end: int, deadline: float
) -> tuple[dict[str, int], int, bool]:
    handle = _handles.get(log_dir)
    if handle is None:
        handle = _handles[log_dir] = TaskHandle(log=log_dir)
    return count_rows(handle.change_log(), first, end, deadline)


# --- in the server -----------------------------------------------------------------------------


@dataclass
class _Task:
    since_us: int  # the heartbeat the interval being counted started at
    next_seq: int  # the first record not counted yet
    rows: dict[str, int] = field(default_factory=dict)  # the interval being counted
    complete: bool = True
    intervals: deque[Interval] = field(default_factory=deque)
    totals: dict[str, int] = field(default_factory=dict)


class TableCounts:
    """Rows per table between heartbeats, per task (module docstring)."""

    def __init__(self, keep: int = 12, budget_s: float = 2.0) -> None:
        self.keep = keep
        self.budget_s = budget_s
        self.pool: FetchPool | None = None
        self._tasks: dict[str, _Task] = {}
        self._lock = threading.Lock()  # the intervals and totals, for readers
        self._updating = threading.Lock()  # one update at a time

    def update(self, name: str, handle: TaskHandle, status: Mapping[str, Any]) -> None:
        """Count what the heartbeats in ``status`` closed since the last update."""
        marks = _marks(status.get("heartbeat_marks"))
        if marks:
            with self._updating:
                self._update(name, handle, marks)

    def _update(self, name: str, handle: TaskHandle, marks: list[tuple[int, int]]) -> None:
        with self._lock:
            task = self._tasks.get(name)
        if task is None or marks[-1][1] < task.next_seq:  # first sight, or a new log
            ts, seq = marks[-1]
            with self._lock:
                self._tasks[name] = _Task(ts, seq, intervals=deque(maxlen=self.keep))
            return
        deadline = time.monotonic() + self.budget_s
        for ts, seq in marks:
            if ts <= task.since_us:
                continue
            if task.next_seq < seq:
                rows, task.next_seq, complete = self._count(handle, task.next_seq, seq, deadline)
                for table, n in rows.items():
                    task.rows[table] = task.rows.get(table, 0) + n
                task.complete = task.complete and complete
                if task.next_seq < seq:
                    return  # out of time, or records not readable yet: the next sample
            with self._lock:
                task.intervals.append(Interval(task.since_us, ts, task.rows, task.complete))
                for table, n in task.rows.items():
                    task.totals[table] = task.totals.get(table, 0) + n
            task.since_us, task.rows, task.complete = ts, {}, True

    def _count(
        self, handle: TaskHandle, first: int, end: int, deadline: float
    ) -> tuple[dict[str, int], int, bool]:
        changelog = handle.change_log()
        pool = self.pool
        if pool is not None:
            try:
                result: tuple[dict[str, int], int, bool] = pool.run(
                    _count_in_worker, os.fspath(changelog.directory), first, end, deadline
                )
                return result
            except StoreError as e:  # a worker died: the next sample tries again
                log.debug("table counts in a worker failed: %s", e)
                return {}, first, True
        return count_rows(changelog, first, end, deadline)

    def intervals(self, name: str) -> list[Interval]:
        """The last intervals of task ``name``, oldest first."""
        with self._lock:
            task = self._tasks.get(name)
            return [] if task is None else list(task.intervals)

    def totals(self) -> dict[str, dict[str, int]]:
        """Per task, rows per table over every interval counted (a counter)."""
        with self._lock:
            return {name: dict(task.totals) for name, task in self._tasks.items()}


def _marks(value: Any) -> list[tuple[int, int]]:
    """``heartbeat_marks`` as (ts_us, seq) pairs in time order; [] when malformed."""
    if not isinstance(value, list):
        return []
    out: list[tuple[int, int]] = []
    for mark in value:
        if (
            isinstance(mark, (list, tuple))
            and len(mark) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in mark)
        ):
            out.append((mark[0], mark[1]))
    return sorted(out)
