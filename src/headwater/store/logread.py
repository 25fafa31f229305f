"""The read side of a change log: what readers (reader.py) ask the log, in and out of process.

In the writer's process the answers come from memory: the acknowledged seq, the memory
tail (the active segment's records, the appended objects themselves), the active
segment's index as the writer builds it, and the catalog. In a reader process
(``read_only=True``) they come from the ``head`` file and the directory listing, refreshed
when a reader needs a seq beyond what it last saw (catalog.py). Invariant: nothing here
returns or reads past the acknowledged point (``_acked`` / ``_pub_end``).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from headwater.errors import CorruptRecordError, PositionNotRetainedError, StoreError
from headwater.store.bulk import FrameRun
from headwater.store.catalog import ActiveState, Catalog, read_head
from headwater.store.index import GtidSummary, IndexView, PosTuple
from headwater.store.options import StoreOptions
from headwater.store.reader import FileWatch
from headwater.store.record import Record
from headwater.store.segment import SegmentMeta, Source, open_source, read_footer, read_record

__all__ = ["ReadSide"]

log = logging.getLogger(__name__)


class ReadSide:
    """Mixin of :class:`~headwater.store.log.ChangeLog`: the internals reader.py uses."""

    _dir: str
    _opts: StoreOptions
    _read_only: bool
    _lock: threading.Lock
    _maint_lock: threading.Lock
    _cond: threading.Condition
    _catalog: Catalog
    _acked: int
    _pub_base: int
    _pub_end: int
    _closed: bool
    _failed: BaseException | None
    _tail: tuple[int, int, list[Record | FrameRun], list[int]]
    _purged: GtidSummary
    _head_fd: int
    _watch: FileWatch | None
    _act: ActiveState

    if TYPE_CHECKING:  # provided by ChangeLog or a sibling mixin

        def _load_purged(self) -> None: ...

    def _set_aside_corrupt(self, meta: SegmentMeta | None, err: CorruptRecordError) -> None:
        """A reader found damage in ``meta``: if it is sealed, set it aside as ``*.bad``.

        Only the writer does this (it owns the directory); readers in other processes just
        raise. The segment leaves the list (copy-on-write) before its file is renamed, so
        no new reader opens it; readers holding it open keep their descriptor.
        """
        if self._read_only or meta is None or meta.footer is None:
            return
        with self._maint_lock:
            with self._lock:
                cur = self._catalog.find(meta.base)
                if cur is None or cur.base != meta.base or cur.footer is None:
                    return
                self._catalog.replace(cur, None)
                self._catalog.drop_view(cur.base)
            try:
                self._catalog.set_aside(cur.path, err)
            except OSError as e:
                log.error("could not set %s aside: %s", cur.path, e)

    def _segments_snapshot(self) -> list[SegmentMeta]:
        return self._catalog.segments

    def _earliest_seq(self) -> int:
        return self._catalog.earliest_seq()

    def _visible_for(self, seq: int) -> int:
        if self._read_only and seq > self._acked:
            self._refresh()
        return self._acked

    def _tail_get(self, seq: int) -> tuple[Record, int, int] | None:
        """(record, segment base, end offset) from the memory tail, or None."""
        first, base, recs, ends = self._tail
        i = seq - first
        if 0 <= i < len(ends):
            rec = recs[i]
            if isinstance(rec, FrameRun):  # appended as frames (bulk.py): decoded on demand
                rec = rec.record(seq)
            return rec, base, ends[i]
        return None

    def _active_first(self) -> tuple[PosTuple, int]:
        if self._read_only:
            segs = self._catalog.segments
            if not segs or self._pub_end == 0:
                return (0, 0, 0, 0), 0
            src = open_source(segs[0].path)
            try:
                rec, _n = read_record(src, 0, self._pub_end)
            finally:
                src.close()
            p = rec.position
            return (p.change_id, p.file_num, p.offset, p.event_index), rec.ts_us
        return self._act.first_pos, self._act.first_ts

    def _active_view_complete(self) -> bool:
        return not self._read_only

    def _purged_summary(self) -> GtidSummary:
        return self._purged

    def _find_segment(self, seq: int) -> SegmentMeta:
        meta = self._catalog.find(seq)
        if self._read_only and (
            meta is None or (meta.footer is not None and meta.footer.last_seq < seq)
        ):
            self._refresh(relist=True)
            meta = self._catalog.find(seq)
        if meta is None or seq < self._catalog.earliest_seq():
            raise PositionNotRetainedError(
                f"seq {seq} is no longer retained (earliest is {self._catalog.earliest_seq()})"
            )
        return meta

    def _view(self, meta: SegmentMeta) -> IndexView:
        if meta.footer is not None:
            return self._catalog.sealed_view(meta)
        if self._read_only:
            return self._catalog.active_view_from_disk(meta, self._pub_end)
        if meta.base == self._act.base:
            return self._act.builder.view
        # Sealed meanwhile by the flusher: its footer lands right after; use the cache.
        return self._catalog.sealed_view(self._wait_sealed(meta))

    def _wait_sealed(self, meta: SegmentMeta) -> SegmentMeta:
        with self._cond:
            self._cond.wait_for(lambda: meta.footer is not None or self._failed is not None, 5.0)
        if meta.footer is None:
            raise StoreError(f"segment {meta.path} was not sealed in time")
        return meta

    def _limit(self, meta: SegmentMeta) -> int:
        if meta.footer is not None:
            return meta.footer.data_end
        if meta.base == self._pub_base:
            return self._pub_end
        if self._read_only and meta.base < self._pub_base:
            meta.footer = read_footer(meta.path)
            return meta.footer.data_end
        return 0

    def _open_source(self, meta: SegmentMeta) -> Source:
        try:
            return open_source(meta.path)
        except FileNotFoundError:
            pass
        # Compressed or deleted since this reader looked: look again.
        if self._read_only:
            self._refresh(relist=True)
        cur = self._catalog.find(meta.base)
        if cur is None or cur.base != meta.base:
            raise PositionNotRetainedError(f"segment {meta.path} is no longer retained") from None
        try:
            return open_source(cur.path)
        except FileNotFoundError:
            raise PositionNotRetainedError(f"segment {meta.path} is no longer retained") from None

    def _wait_for(self, seq: int, timeout: float | None) -> bool:
        """Wait until ``seq`` is acknowledged (or ``timeout``); True if it is."""
        if not self._read_only:
            with self._cond:
                return (
                    self._cond.wait_for(
                        lambda: self._acked >= seq or self._closed or self._failed is not None,
                        timeout,
                    )
                    and self._acked >= seq
                )
        assert self._watch is not None
        self._refresh()
        if self._acked >= seq:
            return True
        self._watch.wait(timeout)
        self._refresh()
        return self._acked >= seq

    def _refresh(self, relist: bool = False) -> None:
        """Read-only: pick up the writer's progress from ``head`` (and the listing)."""
        head = read_head(self._head_fd)
        if head is None:
            raise StoreError(f"{self._dir}: head file unreadable")
        base, end, seq = head
        with self._lock:
            if relist or base != self._pub_base:
                self._catalog.load_readonly(base)
            self._pub_base, self._pub_end, self._acked = base, end, seq
            if self._catalog.earliest_seq() > 1:
                self._load_purged()

    def verify(self) -> list[CorruptRecordError]:
        """Read every retained record and check it; return the damage found (no repair)."""
        found: list[CorruptRecordError] = []
        for meta in list(self._catalog.segments):
            limit = self._limit(meta)
            try:
                src = self._open_source(meta)
            except PositionNotRetainedError:
                continue
            try:
                off, seq = 0, meta.base
                while off < limit:
                    rec, flen = read_record(src, off, limit)
                    if rec.seq != seq:
                        raise CorruptRecordError(
                            f"seq {rec.seq} where {seq} was expected", path=meta.path, offset=off
                        )
                    off += flen
                    seq += 1
            except CorruptRecordError as e:
                found.append(e)
            finally:
                src.close()
        return found
