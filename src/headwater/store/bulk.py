"""Appending record frames built elsewhere: the reader's compiled fast path.

``headwater._native.Scanner`` builds whole-transaction records directly as frames (the
format of record.py) with seq and CRC left 0. :meth:`FrameAppend.append_frames` appends a
run of them the way ``ChangeLog.append_many`` appends records: under ``_alock`` and
``_lock``, it assigns the seqs and CRC32Cs in place (``headwater._native.stamp``), hands the
bytes to the write buffer without copying, keeps the sparse index (block openings, max
timestamp, GTIDs) exactly as ``ChangeLog._encode`` does per record, rolls the segment
before a frame that would start at or beyond ``segment_bytes``, and puts the frames in the
memory tail as :class:`FrameRun` entries, decoded only when a reader asks for one.

Invariants: every frame is a whole transaction (FIRST_CHUNK | LAST_CHUNK), so it may not
arrive inside a chunk group; the bytes of a run are never changed after stamping (the
memory tail and the write buffer share them).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headwater._native import stamp
from headwater.store.catalog import ActiveState
from headwater.store.options import StoreOptions
from headwater.store.record import FIXED, FRAME, Record, decode_body

if TYPE_CHECKING:
    from headwater.errors import StoreError

__all__ = ["FrameAppend", "FrameRun"]

_unpack_fixed = FIXED.unpack_from
_PREFIX = FRAME.size
_FIXED = FIXED.size
_GTID_LEN = 49  # offset of gtid_len in the fixed header
#: log.py's WRITE_CHUNK: the buffer goes to the OS once it holds this many bytes.
_WRITE_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FrameRun:
    """Stamped frames in the memory tail: ``frames[i - base]`` is the byte at segment
    offset ``i``; record ``seq0 + j`` ends at ``ends[j]``, its predecessor at ``ends[j - 1]``
    (``first`` for ``j == 0``)."""

    frames: memoryview
    base: int
    first: int
    seq0: int
    ends: list[int]

    def record(self, seq: int) -> Record:
        j = seq - self.seq0
        start = self.first if j == 0 else self.ends[j - 1]
        view = memoryview(self.frames)
        return decode_body(view[start - self.base + _PREFIX : self.ends[j] - self.base])


class FrameAppend:
    """Mixin of :class:`~headwater.store.log.ChangeLog`: :meth:`append_frames`."""

    _opts: StoreOptions
    _lock: threading.Lock
    _alock: threading.Lock
    _flush_cond: threading.Condition
    _act: ActiveState
    _closed: bool
    _failed: BaseException | None
    _read_only: bool
    _in_group: bool
    _tail: tuple[int, int, list[Record | FrameRun], list[int]]
    _tail_start: int
    _next_seq: int
    _buf: list[bytes | bytearray | memoryview]
    _buf_bytes: int
    _buf_commit: tuple[int, int] | None
    _buf_since: float
    _dirty_since: float | None
    _unsynced: int

    if TYPE_CHECKING:  # provided by ChangeLog or a sibling mixin

        def _check_writable(self) -> None: ...

        def _roll_due(self) -> bool: ...

        def _roll(self) -> None: ...

        def _write_out(self) -> None: ...

        def _wait_synced(self) -> None: ...

        def _trim_tail(self) -> None: ...

        def _fail(self, e: BaseException) -> StoreError: ...

    @property
    def next_seq(self) -> int:
        """The seq the next record appended will get (frames built with it need no
        stamping: ``headwater._native.Scanner.scan``'s ``seq0``)."""
        return self._next_seq

    def append_frames(self, frames: memoryview, gtids: list[str] | None = None) -> int:
        """Append whole-transaction frames (seq and CRC 0) in order; returns the last seq.
        ``gtids``: their GTID strings, if at hand (else the few the index needs as
        strings are read from the frames). Does not wait: see ``wait_acked``. ``frames`` must stay
        unchanged while the log holds it (memory tail, write buffer): the caller can tell
        by the view's export of the underlying buffer."""
        with self._alock:
            if self._closed or self._failed is not None or self._read_only:
                self._check_writable()
            if self._in_group:
                raise ValueError("a new transaction began inside a chunk group")
            if self._roll_due():
                self._roll()
            start, done, total = 0, 0, len(frames)
            while start < total:
                with self._lock:
                    if self._act.size >= self._opts.segment_bytes and self._act.builder.count:
                        roll = True
                    else:
                        roll = False
                        empty = not self._buf
                        start, n = self._stamp(frames, start, gtids, done)
                        done += n
                        if empty:
                            self._buf_since = now = time.monotonic()
                            if self._dirty_since is None:
                                self._dirty_since = now
                                self._flush_cond.notify()
                if roll:
                    self._roll()
                elif self._buf_bytes >= _WRITE_CHUNK:
                    self._write_out()
                    if self._unsynced > self._opts.max_pending_bytes:
                        self._wait_synced()
            return self._next_seq - 1

    def _stamp(
        self, frames: memoryview, start: int, gtids: list[str] | None, done: int
    ) -> tuple[int, int]:
        """Stamp the frames from ``start`` that go in the active segment (under ``_lock``);
        returns where they end and how many there were."""
        act = self._act
        builder = act.builder
        seq0, off0 = self._next_seq, act.size
        n, stop, ends, blocks, bb, mts = stamp(
            frames,
            start,
            seq0,
            off0,
            self._opts.segment_bytes,
            builder.block_bytes,
            builder.interval,
            not builder.view.seqs,
            builder.max_ts,
        )
        base = off0 - start

        def gput(lo: int, hi: int) -> None:
            if gtids is not None:
                builder.gtids.extend(gtids[done + lo : done + hi])
                return
            for j in range(lo, hi):
                at = (off0 if j == 0 else ends[j - 1]) - base + _PREFIX
                glen = frames[at + _GTID_LEN]
                builder.gtids.append(bytes(frames[at + _FIXED : at + _FIXED + glen]).decode())

        prev = 0
        for i, max_before, leaf in blocks:
            if leaf is None:  # summarized from the strings (a block begun before, ...)
                gput(prev, i)
            prev = i
            at = off0 if i == 0 else ends[i - 1]
            fixed = _unpack_fixed(frames, at - base + _PREFIX)
            pt = (fixed[1], fixed[2], fixed[3], fixed[4])
            if not builder.view.seqs:
                act.first_pos, act.first_ts = pt, fixed[5]
            builder.max_ts = max_before
            builder.open_block(seq0 + i, at, pt, fixed[5], leaf)
        gput(prev, n)
        last = _unpack_fixed(frames, (off0 if n == 1 else ends[n - 2]) - base + _PREFIX)
        end = ends[-1]
        act.last_pos = (last[1], last[2], last[3], last[4])
        act.last_seq = seq0 + n - 1
        act.size = end
        builder.block_bytes, builder.max_ts = bb, mts
        builder.count += n
        self._next_seq = seq0 + n
        self._buf.append(frames[start:stop])
        self._buf_bytes += end - off0
        self._buf_commit = (seq0 + n - 1, end)
        if self._opts.memory_tail_bytes > 0:
            _first, _base, recs, tends = self._tail
            run = FrameRun(frames, base, off0, seq0, ends)
            recs.extend([run] * n)
            tends.extend(ends)
            if end - self._tail_start > self._opts.memory_tail_bytes:
                self._trim_tail()
        return stop, n
