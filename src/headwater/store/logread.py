"""The read side of a change log: what cursors (cursor.py) ask the log, in and out of process.

In the writer's process the answers come from memory: the acknowledged point
(published.py), the writer's memory tail (the active segment's records, the appended
objects themselves), the active segment's index as the writer builds it, and the catalog.
In a reader process (``read_only=True``, no writer) they come from the ``head`` file and
the directory listing, refreshed when a cursor needs a seq beyond what it last saw
(catalog.py); :class:`ReadSide` owns that file and its inotify watch. Invariant: nothing
here returns or reads past the acknowledged point (``acked`` / ``end``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from headwater.errors import CorruptRecordError, PositionNotRetainedError, StoreError
from headwater.store.bulk import FrameRun
from headwater.store.catalog import HEAD_NAME, Catalog, read_head
from headwater.store.index import GtidSummary, IndexView, PosTuple
from headwater.store.maintenance import Maintenance
from headwater.store.published import Published
from headwater.store.record import Record
from headwater.store.segment import SegmentMeta, Source, open_source, read_footer, read_record
from headwater.store.watch import FileWatch

if TYPE_CHECKING:
    from headwater.store.writer import Writer

__all__ = ["ReadSide"]

log = logging.getLogger(__name__)


class ReadSide:
    """What cursors ask a log: segments, views, limits, the tail, waiting (see above).

    ``writer`` is None in a reader process; there ``open_head`` reads the writer's
    ``head`` file instead.
    """

    def __init__(
        self,
        pub: Published,
        catalog: Catalog,
        maint: Maintenance,
        writer: Writer | None,
    ) -> None:
        self.pub = pub
        self.catalog = catalog
        self.maint = maint
        self.writer = writer
        self.read_only = writer is None
        self.watch: FileWatch | None = None

    def open_head(self) -> None:
        """Reader process: open the writer's ``head`` file and watch it."""
        path = os.path.join(self.pub.dir, HEAD_NAME)
        try:
            self.pub.head_fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise StoreError(f"{self.pub.dir}: no change log here (no head file)") from None
        self.watch = FileWatch(path)
        self.pub.base = -1
        self.refresh()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def set_aside_corrupt(self, meta: SegmentMeta | None, err: CorruptRecordError) -> None:
        """A reader found damage in ``meta``: if it is sealed, set it aside as ``*.bad``.

        Only the writer does this (it owns the directory); readers in other processes just
        raise. The segment leaves the list (copy-on-write) before its file is renamed, so
        no new reader opens it; readers holding it open keep their descriptor.
        """
        if self.read_only or meta is None or meta.footer is None:
            return
        with self.maint.lock:
            with self.pub.lock:
                cur = self.catalog.find(meta.base)
                if cur is None or cur.base != meta.base or cur.footer is None:
                    return
                self.catalog.replace(cur, None)
                self.catalog.drop_view(cur.base)
            try:
                self.catalog.set_aside(cur.path, err)
            except OSError as e:
                log.error("could not set %s aside: %s", cur.path, e)

    def segments_snapshot(self) -> list[SegmentMeta]:
        return self.catalog.segments

    def earliest_seq(self) -> int:
        return self.catalog.earliest_seq()

    def visible_for(self, seq: int) -> int:
        if self.read_only and seq > self.pub.acked:
            self.refresh()
        return self.pub.acked

    def tail_get(self, seq: int) -> tuple[Record, int, int] | None:
        """(record, segment base, end offset) from the memory tail, or None."""
        if self.writer is None:  # a reader process has no memory tail
            return None
        first, base, recs, ends = self.writer.tail
        i = seq - first
        if 0 <= i < len(ends):
            rec = recs[i]
            if isinstance(rec, FrameRun):  # appended as frames (bulk.py): decoded on demand
                rec = rec.record(seq)
            return rec, base, ends[i]
        return None

    def active_first(self) -> tuple[PosTuple, int]:
        if self.read_only:
            segs = self.catalog.segments
            if not segs or self.pub.end == 0:
                return (0, 0, 0, 0), 0
            src = open_source(segs[0].path)
            try:
                rec, _n = read_record(src, 0, self.pub.end)
            finally:
                src.close()
            p = rec.position
            return (p.change_id, p.file_num, p.offset, p.event_index), rec.ts_us
        assert self.writer is not None
        act = self.writer.segs.act
        return act.first_pos, act.first_ts

    def active_view_complete(self) -> bool:
        return not self.read_only

    def purged_summary(self) -> GtidSummary:
        return self.maint.purged

    def find_segment(self, seq: int) -> SegmentMeta:
        meta = self.catalog.find(seq)
        if self.read_only and (
            meta is None or (meta.footer is not None and meta.footer.last_seq < seq)
        ):
            self.refresh(relist=True)
            meta = self.catalog.find(seq)
        if meta is None or seq < self.catalog.earliest_seq():
            raise PositionNotRetainedError(
                f"seq {seq} is no longer retained (earliest is {self.catalog.earliest_seq()})"
            )
        return meta

    def view(self, meta: SegmentMeta) -> IndexView:
        if meta.footer is not None:
            return self.catalog.sealed_view(meta)
        if self.read_only:
            return self.catalog.active_view_from_disk(meta, self.pub.end)
        assert self.writer is not None
        act = self.writer.segs.act
        if meta.base == act.base:
            return act.builder.view
        # Sealed meanwhile by the flusher: its footer lands right after; use the cache.
        return self.catalog.sealed_view(self.wait_sealed(meta))

    def wait_sealed(self, meta: SegmentMeta) -> SegmentMeta:
        with self.pub.cond:
            self.pub.cond.wait_for(
                lambda: meta.footer is not None or self.pub.failed is not None, 5.0
            )
        if meta.footer is None:
            raise StoreError(f"segment {meta.path} was not sealed in time")
        return meta

    def limit(self, meta: SegmentMeta) -> int:
        if meta.footer is not None:
            return meta.footer.data_end
        if meta.base == self.pub.base:
            return self.pub.end
        if self.read_only and meta.base < self.pub.base:
            meta.footer = read_footer(meta.path)
            return meta.footer.data_end
        return 0

    def open_source(self, meta: SegmentMeta) -> Source:
        try:
            return open_source(meta.path)
        except FileNotFoundError:
            pass
        # Compressed or deleted since this reader looked: look again.
        if self.read_only:
            self.refresh(relist=True)
        cur = self.catalog.find(meta.base)
        if cur is None or cur.base != meta.base:
            raise PositionNotRetainedError(f"segment {meta.path} is no longer retained") from None
        try:
            return open_source(cur.path)
        except FileNotFoundError:
            raise PositionNotRetainedError(f"segment {meta.path} is no longer retained") from None

    def wait_for(self, seq: int, timeout: float | None) -> bool:
        """Wait until ``seq`` is acknowledged (or ``timeout``); True if it is."""
        if not self.read_only:
            with self.pub.cond:
                return (
                    self.pub.cond.wait_for(
                        lambda: (
                            self.pub.acked >= seq or self.pub.closed or self.pub.failed is not None
                        ),
                        timeout,
                    )
                    and self.pub.acked >= seq
                )
        assert self.watch is not None
        self.refresh()
        if self.pub.acked >= seq:
            return True
        self.watch.wait(timeout)
        self.refresh()
        return self.pub.acked >= seq

    def refresh(self, relist: bool = False) -> None:
        """Read-only: pick up the writer's progress from ``head`` (and the listing)."""
        head = read_head(self.pub.head_fd)
        if head is None:
            raise StoreError(f"{self.pub.dir}: head file unreadable")
        base, end, seq = head
        with self.pub.lock:
            if relist or base != self.pub.base:
                self.catalog.load_readonly(base)
            self.pub.base, self.pub.end, self.pub.acked = base, end, seq
            if self.catalog.earliest_seq() > 1:
                self.maint.load_purged()

    def verify(self) -> list[CorruptRecordError]:
        """Read every retained record and check it; return the damage found (no repair)."""
        found: list[CorruptRecordError] = []
        for meta in list(self.catalog.segments):
            limit = self.limit(meta)
            try:
                src = self.open_source(meta)
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
