"""Rolling the active segment: sealing it and starting the next one.

A segment is rolled only at a transaction boundary (a chunk group never spans segments)
by the appending thread once the active segment reaches ``segment_bytes`` or is older than
``roll_interval_s``, or by the flusher when an idle log's segment is that old. Sealing, in
this order: write out the buffer, write the sealed index by temp file + rename, append
the footer, fsync, then create the next segment and fsync the directory. So at most the
newest segment lacks a footer, and a segment with a footer always has its whole index.
The old segment is then wholly durable, so its last seq is acknowledged. Its descriptor
is retired, not closed: the flusher may still be syncing it and closes it next cycle.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from headwater.errors import StoreError
from headwater.store._fs import atomic_write, fsync_dir, write_all
from headwater.store.bulk import FrameRun
from headwater.store.catalog import ActiveState, Catalog, seal_footer, write_head
from headwater.store.index import ENTRY, IndexBuilder, encode_trailer
from headwater.store.options import StoreOptions
from headwater.store.record import Record
from headwater.store.segment import IDX, SegmentMeta, encode_footer_tail, segment_name

if TYPE_CHECKING:
    from headwater.store.log import _Mark

__all__ = ["Rolling"]


class Rolling:
    """Mixin of :class:`~headwater.store.log.ChangeLog`: when and how segments roll."""

    _dir: str
    _opts: StoreOptions
    _lock: threading.Lock
    _alock: threading.Lock
    _wlock: threading.Lock
    _cond: threading.Condition
    _catalog: Catalog
    _act: ActiveState
    _act_created: float
    _closed: bool
    _failed: BaseException | None
    _in_group: bool
    _wfd: int
    _ifd: int
    _retired: list[int]
    _tail: tuple[int, int, list[Record | FrameRun], list[int]]
    _tail_start: int
    _written: _Mark | None
    _unsynced: int
    _acked: int
    _pub_base: int
    _pub_end: int
    _head_fd: int

    if TYPE_CHECKING:  # provided by ChangeLog or a sibling mixin

        def _write_out_locked(self) -> None: ...

        def _fail(self, e: BaseException) -> StoreError: ...

    def _roll_due(self) -> bool:
        act = self._act
        if act.builder.count == 0:
            return False
        if act.size >= self._opts.segment_bytes:
            return True
        ival = self._opts.roll_interval_s
        return ival is not None and time.monotonic() - self._act_created >= ival

    def _roll_timer_due(self) -> bool:
        """Whether ``roll_interval_s`` has passed for a non-empty active segment."""
        ival = self._opts.roll_interval_s
        return (
            ival is not None
            and self._act.builder.count > 0
            and time.monotonic() - self._act_created >= ival
        )

    def _idle_wait(self) -> float | None:
        """How long an idle flusher may sleep before the active segment is due to roll."""
        ival = self._opts.roll_interval_s
        if ival is None or self._act.builder.count == 0:
            return None
        return max(0.01, self._act_created + ival - time.monotonic())

    def _roll_if_idle(self) -> None:
        """Flusher: roll an idle log whose active segment is old enough (time-based roll).

        If an appender is busy it rolls by itself at its next call; the flusher does not
        wait for it.
        """
        with self._lock:
            if not self._roll_timer_due():
                return
        if not self._alock.acquire(blocking=False):
            return
        try:
            if (
                not self._closed
                and self._failed is None
                and not self._in_group
                and self._roll_due()
            ):
                self._roll()
        finally:
            self._alock.release()

    def _roll(self) -> None:
        """Seal the active segment and start the next one (appending thread, ``_alock``)."""
        with self._wlock:
            self._write_out_locked()
            with self._lock:
                act = self._act
                entries = act.builder.seal()
                footer = seal_footer(act.base, act, time.time_ns() // 1000)
                view = act.builder.view
                act.builder.take_unwritten()
                old_wfd, old_ifd = self._wfd, self._ifd
            base = act.last_seq + 1
            try:
                # The sealed index goes in place before the footer: once a footer exists,
                # its index is whole (a crash in between leaves an unsealed segment,
                # rebuilt anyway).
                os.close(old_ifd)
                self._ifd = -1
                atomic_write(
                    os.path.join(self._dir, segment_name(act.base, IDX)),
                    entries
                    + encode_trailer(
                        entries, len(entries) // ENTRY.size, footer.last_seq, footer.data_end
                    ),
                )
                write_all(old_wfd, encode_footer_tail(footer))
                os.fsync(old_wfd)
                size = os.fstat(old_wfd).st_size
                path = os.path.join(self._dir, segment_name(base))
                wfd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
                ifd = os.open(
                    os.path.join(self._dir, segment_name(base, IDX)),
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC,
                    0o644,
                )
                fsync_dir(self._dir)
            except BaseException as e:
                raise self._fail(e) from e
            with self._lock:
                meta = self._catalog.find(act.base)
                assert meta is not None and meta.base == act.base
                meta.file_bytes = size
                meta.footer = footer
                self._catalog.cache_view(act.base, view)
                self._catalog.segments = [
                    *self._catalog.segments,
                    SegmentMeta(base, path, None, 0),
                ]
                self._retired.append(old_wfd)
                self._wfd, self._ifd = wfd, ifd
                self._act = ActiveState(
                    base,
                    0,
                    base - 1,
                    IndexBuilder(self._opts.index_interval_bytes),
                    (0, 0, 0, 0),
                    (0, 0, 0, 0),
                    0,
                )
                self._act_created = time.monotonic()
                self._tail = (base, base, [], [])
                self._tail_start = 0
                # Everything of the old segment is durable now (fsync above).
                self._written = None
                self._unsynced = 0
                self._acked = max(self._acked, footer.last_seq)
                self._pub_base, self._pub_end = base, 0
                write_head(self._head_fd, base, 0, self._acked)
                self._cond.notify_all()
