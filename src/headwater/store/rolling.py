"""The active segment and its rotation: when a segment rolls, and how it is sealed.

:class:`Segments` owns the active segment (its recovered or fresh :class:`ActiveState`,
the data and index descriptors, when it was started) and the descriptors of segments
rolled but maybe still being synced by the flusher (``retired``, closed by the flusher at
its next cycle). The writer (writer.py) decides to roll (``due``) and runs a roll in three
steps around its own buffer: :meth:`Segments.begin_seal` (under the lock), :meth:`write_seal`
(I/O, no lock), :meth:`Segments.start_next` (under the lock).

A segment is rolled only at a transaction boundary (a chunk group never spans segments)
by the appending thread once the active segment reaches ``segment_bytes`` or is older than
``roll_interval_s``, or by the flusher when an idle log's segment is that old. Sealing, in
this order: write out the buffer, write the sealed index by temp file + rename, append
the footer, fsync, then create the next segment and fsync the directory. So at most the
newest segment lacks a footer, and a segment with a footer always has its whole index.
The old segment is then wholly durable, so its last seq is acknowledged.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from headwater.store._fs import atomic_write, fsync_dir, write_all
from headwater.store.catalog import ActiveState, Catalog, seal_footer
from headwater.store.index import ENTRY, IndexBuilder, IndexView, encode_trailer
from headwater.store.options import StoreOptions
from headwater.store.segment import IDX, Footer, SegmentMeta, encode_footer_tail, segment_name

__all__ = ["Sealing", "Segments"]


@dataclass(frozen=True, slots=True)
class Sealing:
    """A roll under way: the segment being sealed and what its seal consists of."""

    act: ActiveState
    entries: bytes
    footer: Footer
    view: IndexView
    wfd: int
    ifd: int


class Segments:
    """The active segment of a writable log and its rotation (see the module docstring)."""

    def __init__(self, directory: str, options: StoreOptions, catalog: Catalog) -> None:
        self.dir = directory
        self.opts = options
        self.catalog = catalog
        self.act: ActiveState
        self.created = 0.0
        self.wfd = -1
        self.ifd = -1
        #: descriptors of rolled segments, closed by the flusher (it may be syncing them)
        self.retired: list[int] = []

    def start(self, act: ActiveState) -> None:
        """Open the (recovered) active segment for appending."""
        self.act = act
        self.created = time.monotonic()
        self.wfd = os.open(
            os.path.join(self.dir, segment_name(act.base)), os.O_WRONLY | os.O_APPEND
        )
        self.ifd = os.open(
            os.path.join(self.dir, segment_name(act.base, IDX)),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT,
            0o644,
        )

    def close(self) -> None:
        for fd in (*self.retired, self.wfd, self.ifd):
            if fd >= 0:
                os.close(fd)
        self.retired = []
        self.wfd = self.ifd = -1

    # --- when ------------------------------------------------------------------------------

    def due(self) -> bool:
        """Whether the next transaction must go to a new segment (size or age)."""
        act = self.act
        if act.builder.count == 0:
            return False
        if act.size >= self.opts.segment_bytes:
            return True
        ival = self.opts.roll_interval_s
        return ival is not None and time.monotonic() - self.created >= ival

    def timer_due(self) -> bool:
        """Whether ``roll_interval_s`` has passed for a non-empty active segment."""
        ival = self.opts.roll_interval_s
        return (
            ival is not None
            and self.act.builder.count > 0
            and time.monotonic() - self.created >= ival
        )

    def idle_wait(self) -> float | None:
        """How long an idle flusher may sleep before the active segment is due to roll."""
        ival = self.opts.roll_interval_s
        if ival is None or self.act.builder.count == 0:
            return None
        return max(0.01, self.created + ival - time.monotonic())

    # --- how -------------------------------------------------------------------------------

    def begin_seal(self) -> Sealing:
        """Take the active segment's seal (under the log's lock, the buffer written out)."""
        act = self.act
        entries = act.builder.seal()
        footer = seal_footer(act.base, act, time.time_ns() // 1000)
        view = act.builder.view
        act.builder.take_unwritten()
        return Sealing(act, entries, footer, view, self.wfd, self.ifd)

    def write_seal(self, s: Sealing) -> tuple[int, int, int]:
        """Seal on disk and create the next segment (no lock; raises on I/O errors).
        Returns the sealed file's size and the next segment's descriptors."""
        # The sealed index goes in place before the footer: once a footer exists, its
        # index is whole (a crash in between leaves an unsealed segment, rebuilt anyway).
        os.close(s.ifd)
        self.ifd = -1
        atomic_write(
            os.path.join(self.dir, segment_name(s.act.base, IDX)),
            s.entries
            + encode_trailer(
                s.entries, len(s.entries) // ENTRY.size, s.footer.last_seq, s.footer.data_end
            ),
        )
        write_all(s.wfd, encode_footer_tail(s.footer))
        os.fsync(s.wfd)
        size = os.fstat(s.wfd).st_size
        base = s.act.last_seq + 1
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC
        wfd = os.open(os.path.join(self.dir, segment_name(base)), flags, 0o644)
        ifd = os.open(os.path.join(self.dir, segment_name(base, IDX)), flags, 0o644)
        fsync_dir(self.dir)
        return size, wfd, ifd

    def start_next(self, s: Sealing, size: int, wfd: int, ifd: int) -> int:
        """Point the segment list at the sealed segment and the new one (under the lock);
        returns the new active segment's base."""
        act = s.act
        base = act.last_seq + 1
        meta = self.catalog.find(act.base)
        assert meta is not None and meta.base == act.base
        meta.file_bytes = size
        meta.footer = s.footer
        self.catalog.cache_view(act.base, s.view)
        self.catalog.segments = [
            *self.catalog.segments,
            SegmentMeta(base, os.path.join(self.dir, segment_name(base)), None, 0),
        ]
        self.retired.append(s.wfd)
        self.wfd, self.ifd = wfd, ifd
        self.act = ActiveState(
            base,
            0,
            base - 1,
            IndexBuilder(self.opts.index_interval_bytes),
            (0, 0, 0, 0),
            (0, 0, 0, 0),
            0,
        )
        self.created = time.monotonic()
        return base
