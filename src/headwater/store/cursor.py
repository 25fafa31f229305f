"""Readers of the change log: where to start (lookups), iteration, and tailing.

A reader holds a cursor (next seq, segment, byte offset) and never hands out a record whose
seq is above the log's acknowledged seq: in the writer's process that is the in-memory
``acked`` value, in another process the ``head`` file (see catalog.py). Records still in
the writer's memory tail are served from memory; others are read from disk and checked
(CRC32C, expected seq). In the writer's process, damage found in a *sealed* segment also
sets that segment aside (renamed ``*.bad``, reported in ``problems``) before the error is
raised, so it is reported once and never served again; the active segment is left to
recovery. Waiting for new records uses a condition variable in the writer's
process and inotify on ``head`` in other processes: no polling sleeps (a 50 ms poll is the
fallback only where inotify is unavailable).

Start points (:data:`Start`): ``"earliest"``, ``"latest"`` (only records appended after the
reader opens), :class:`AtSeq`, a :class:`~headwater.position.Position` (first record whose
position is ``>=`` it), :class:`AtTime` (first record whose commit time is ``>=`` it, correct
when timestamps go backwards), or a GTID set (first record whose GTID is not in the set: a
``MysqlGtidSet``, or a ``MariadbGtidPos``; records without a GTID are never "in" a set).
Costs are described in index.py: a bisect over segments, a bisect over one segment's
sparse index, and a scan of about one index interval.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from headwater.errors import CorruptRecordError, PositionNotRetainedError
from headwater.position import MariadbGtidPos, MysqlGtidSet, Position
from headwater.store.index import GtidWanted, IndexView
from headwater.store.record import Record, RecordHead
from headwater.store.segment import SegmentMeta, Source, read_head, read_record

if TYPE_CHECKING:
    from headwater.store.log import ChangeLog

__all__ = ["EARLIEST", "LATEST", "AtSeq", "AtTime", "LogReader", "Start", "Transaction"]

EARLIEST: Literal["earliest"] = "earliest"
LATEST: Literal["latest"] = "latest"


@dataclass(frozen=True, slots=True)
class AtSeq:
    """Start at the record with this sequence number."""

    seq: int


@dataclass(frozen=True, slots=True)
class AtTime:
    """Start at the first record whose commit timestamp (microseconds) is >= ``ts_us``."""

    ts_us: int


Start = Literal["earliest", "latest"] | AtSeq | AtTime | Position | MysqlGtidSet | MariadbGtidPos


@dataclass(slots=True)
class Transaction:
    """A whole transaction reassembled from its chunks (memory grows with its size)."""

    records: list[Record]

    @property
    def payload(self) -> bytes:
        return b"".join(r.payload for r in self.records)


def _pt(p: Position) -> tuple[int, int, int, int]:
    return (p.change_id, p.file_num, p.offset, p.event_index)


def locate(log: ChangeLog, start: Start) -> tuple[int, SegmentMeta | None, int]:
    """Where a reader starting at ``start`` begins: (seq, segment or None, offset).

    A None segment means "resolve by seq when that seq becomes visible".
    """
    acked = log.acked_seq
    segs = log.read_side.segments_snapshot()
    earliest = segs[0].base if segs else 1
    if start == EARLIEST:
        return earliest, None, 0
    if start == LATEST:
        return acked + 1, None, 0
    if isinstance(start, AtSeq):
        if start.seq < earliest:
            raise PositionNotRetainedError(
                f"seq {start.seq} is no longer retained (earliest is {earliest})"
            )
        return max(start.seq, 1), None, 0
    if isinstance(start, AtTime):
        return _locate_time(log, segs, start.ts_us, acked)
    if isinstance(start, Position):
        return _locate_position(log, segs, _pt(start), acked)
    return _locate_gtid(log, segs, start, acked)


def _end(acked: int) -> tuple[int, SegmentMeta | None, int]:
    return acked + 1, None, 0


def _first_info(log: ChangeLog, meta: SegmentMeta) -> tuple[tuple[int, int, int, int], int]:
    if meta.footer is not None:
        return meta.footer.first_pos, meta.footer.first_ts
    return log.read_side.active_first()


def _locate_position(
    log: ChangeLog, segs: list[SegmentMeta], p: tuple[int, int, int, int], acked: int
) -> tuple[int, SegmentMeta | None, int]:
    if not segs:
        return _end(acked)
    if segs[0].base > 1 and p < _first_info(log, segs[0])[0]:
        raise PositionNotRetainedError(
            f"position {Position(*p)} is older than the earliest retained record"
        )
    sealed = [m for m in segs if m.footer is not None]
    k = bisect.bisect_left([m.footer.last_pos for m in sealed if m.footer is not None], p)
    for meta in segs[k:]:
        view = log.read_side.view(meta)
        hi = view.visible(acked)
        i = bisect.bisect_left(view.poss, p, 0, hi)
        found = _scan_from_entry(log, meta, view, i - 1, acked, lambda r: _pt(r.position) >= p)
        if found is not None:
            return found
    return _end(acked)


def _locate_time(
    log: ChangeLog, segs: list[SegmentMeta], ts: int, acked: int
) -> tuple[int, SegmentMeta | None, int]:
    if not segs:
        return _end(acked)
    if segs[0].base > 1 and ts < _first_info(log, segs[0])[1]:
        raise PositionNotRetainedError(f"time {ts} us is older than the retained records")
    cum: list[int] = []
    running = 0
    for m in segs:
        if m.footer is None:
            break
        running = max(running, m.footer.max_ts)
        cum.append(running)
    k = bisect.bisect_left(cum, ts)
    for meta in segs[k:]:
        view = log.read_side.view(meta)
        hi = view.visible(acked)
        i = bisect.bisect_left(view.mtb, ts, 0, hi)
        found = _scan_from_entry(log, meta, view, i - 1, acked, lambda r: r.ts_us >= ts)
        if found is not None:
            return found
    return _end(acked)


def _locate_gtid(
    log: ChangeLog, segs: list[SegmentMeta], wanted: MysqlGtidSet | MariadbGtidPos, acked: int
) -> tuple[int, SegmentMeta | None, int]:
    w = GtidWanted(wanted)
    if segs and segs[0].base > 1 and not w.covers_summary(log.read_side.purged_summary()):
        raise PositionNotRetainedError(
            "GTIDs missing from the wanted set were in records no longer retained"
        )

    def pred(r: Record) -> bool:
        return not w.contains(r.gtid)

    for meta in segs:
        if meta.footer is not None and w.covers_summary(meta.footer.summary):
            continue
        view = log.read_side.view(meta)
        hi = view.visible(acked)
        i = 0
        while True:
            i = view.first_unskippable(i, hi, w)
            if i >= hi:
                break
            stop = view.seqs[i + 1] if i + 1 < len(view) else None
            found = _scan_from_entry(log, meta, view, i, acked, pred, stop)
            if found is not None:
                return found
            i += 1
        if meta.footer is None and not log.read_side.active_view_complete():
            # A reader in another process sees only closed blocks of the active index.
            found = _scan_from_entry(log, meta, view, hi - 1, acked, pred)
            if found is not None:
                return found
    return _end(acked)


def _locate_seq(log: ChangeLog, seq: int, acked: int) -> tuple[SegmentMeta, int]:
    meta = log.read_side.find_segment(seq)
    view = log.read_side.view(meta)
    i = bisect.bisect_right(view.seqs, seq, 0, view.visible(acked)) - 1
    found = _scan_from_entry(log, meta, view, i, acked, lambda r: r.seq >= seq)
    if found is None or found[0] != seq:
        raise CorruptRecordError(f"record seq {seq} not found in its segment", path=meta.path)
    assert found[1] is not None
    return found[1], found[2]


def _scan_from_entry(
    log: ChangeLog,
    meta: SegmentMeta,
    view: IndexView,
    i: int,
    acked: int,
    pred: Callable[[Record], bool],
    stop_seq: int | None = None,
) -> tuple[int, SegmentMeta | None, int] | None:
    """First record from index entry ``i`` (segment start if ``i < 0``) matching ``pred``."""
    seq, off = (view.seqs[i], view.offs[i]) if i >= 0 else (meta.base, 0)
    limit = log.read_side.limit(meta)
    src = log.read_side.open_source(meta)
    try:
        while off < limit and seq <= acked and (stop_seq is None or seq < stop_seq):
            rec, flen = read_record(src, off, limit)
            if rec.seq != seq:
                raise CorruptRecordError(
                    f"record has seq {rec.seq}, expected {seq}", path=src.path, offset=off
                )
            if pred(rec):
                return seq, meta, off
            seq += 1
            off += flen
    except CorruptRecordError as e:
        log.read_side.set_aside_corrupt(meta, e)
        raise
    finally:
        src.close()
    return None


class LogReader:
    """An iterator over the acknowledged records of a log, from a start point on.

    ``next(timeout)`` returns the next record, waiting up to ``timeout`` seconds (None:
    forever, 0: not at all) for one to be acknowledged; None when none came. Iterating
    yields what is available now and stops. Raises :class:`PositionNotRetainedError` if
    retention removed the data under the cursor, :class:`CorruptRecordError` on damage.
    """

    def __init__(self, log: ChangeLog, start: Start) -> None:
        self._src: Source | None = None
        self._log = log
        self._seq, self._meta, self._off = locate(log, start)

    @property
    def next_seq(self) -> int:
        """Sequence number of the record the next call returns."""
        return self._seq

    def next(self, timeout: float | None = 0.0) -> Record | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rec = self._try_read()
            if rec is not None:
                return rec
            if timeout == 0 or self._log.closed:
                return None
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            self._log.read_side.wait_for(self._seq, remaining)

    def next_transaction(self, timeout: float | None = 0.0) -> Transaction | None:
        """The next whole transaction, its chunks gathered (skips a leading partial one)."""
        rec = self.next(timeout)
        while rec is not None and not rec.first_chunk:
            rec = self.next(timeout)
        if rec is None:
            return None
        records = [rec]
        while not records[-1].last_chunk:
            nxt = self.next(timeout)
            if nxt is None:
                raise CorruptRecordError(f"chunked transaction at seq {rec.seq} has no end")
            records.append(nxt)
        return Transaction(records)

    def __iter__(self) -> Iterator[Record]:
        while True:
            rec = self._try_read()
            if rec is None:
                return
            yield rec

    def heads(self) -> Iterator[RecordHead]:
        """Like iterating, but the records' :class:`RecordHead` s: the header fields and
        payload size, CRC-checked, without the payload built (a planning read's)."""
        while True:
            got = self._read(True)
            if got is None:
                return
            assert isinstance(got, RecordHead)
            yield got

    def close(self) -> None:
        if self._src is not None:
            self._src.close()
            self._src = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _try_read(self) -> Record | None:
        rec = self._read(False)
        assert rec is None or isinstance(rec, Record)
        return rec

    def _read(self, head: bool) -> Record | RecordHead | None:
        """The next record, or its head (:meth:`heads`), or None when none is there."""
        log = self._log
        seq = self._seq
        if seq > log.read_side.visible_for(seq):
            return None
        if seq < log.read_side.earliest_seq():
            raise PositionNotRetainedError(
                f"seq {seq} is no longer retained (earliest is {log.read_side.earliest_seq()})"
            )
        hit = log.read_side.tail_get(seq)
        if hit is not None:
            held, base, end = hit
            if self._meta is None or self._meta.base != base:
                self._switch(log.read_side.find_segment(seq))
            self._off = end
            self._seq = seq + 1
            return RecordHead.of(held) if head else held
        if self._meta is None:
            meta, off = _locate_seq(log, seq, log.acked_seq)
            self._switch(meta)
            self._off = off
        assert self._meta is not None
        limit = log.read_side.limit(self._meta)
        if self._off >= limit and self._meta.footer is not None:
            nxt = log.read_side.find_segment(seq)
            if nxt.base != seq:
                raise CorruptRecordError(
                    f"records from seq {seq} are missing (segment set aside as corrupt?)",
                    path=self._meta.path,
                    offset=self._off,
                )
            self._switch(nxt)
            self._off = 0
            limit = log.read_side.limit(nxt)
        if self._src is None:
            self._src = log.read_side.open_source(self._meta)
        rec: Record | RecordHead
        try:
            rec, flen = (read_head if head else read_record)(self._src, self._off, limit)
            if rec.seq != seq:
                raise CorruptRecordError(
                    f"record has seq {rec.seq}, expected {seq}",
                    path=self._src.path,
                    offset=self._off,
                )
        except CorruptRecordError as e:
            log.read_side.set_aside_corrupt(self._meta, e)
            raise
        self._off += flen
        self._seq = seq + 1
        return rec

    def _switch(self, meta: SegmentMeta) -> None:
        if self._src is not None:
            self._src.close()
            self._src = None
        self._meta = meta
