"""Appending record frames built elsewhere: the reader's compiled fast path.

``headwater._native.Scanner`` builds whole-transaction records directly as frames (the
format of record.py) with seq and CRC left 0. :func:`append_frames` appends a run of them
to a :class:`~headwater.store.writer.Writer` the way ``Writer.append_many`` appends
records: under its ``alock`` and the published lock, it assigns the seqs and CRC32Cs in
place (``headwater._native.stamp``), hands the bytes to the write buffer without copying,
opens sparse-index blocks through the writer's one ``open_block`` (the C code finds where
blocks begin and their max timestamps), keeps the GTIDs, rolls the segment
before a frame that would start at or beyond ``segment_bytes``, and puts the frames in the
memory tail as :class:`FrameRun` entries, decoded only when a reader asks for one.

Invariants: every frame is a whole transaction (FIRST_CHUNK | LAST_CHUNK), so it may not
arrive inside a chunk group; the bytes of a run are never changed after stamping (the
memory tail and the write buffer share them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headwater._native import stamp
from headwater.store.record import FIXED, FRAME, Record, decode_body
from headwater.store.writer import WRITE_CHUNK, open_block

if TYPE_CHECKING:
    from headwater.store.writer import Writer

__all__ = ["FrameRun", "append_frames"]

_unpack_fixed = FIXED.unpack_from
_PREFIX = FRAME.size
_FIXED = FIXED.size
_GTID_LEN = 49  # offset of gtid_len in the fixed header


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


def append_frames(w: Writer, frames: memoryview, gtids: list[str] | None = None) -> int:
    """See :meth:`ChangeLog.append_frames`: the frame path of writer ``w``."""
    pub = w.pub
    with w.alock:
        if pub.closed or pub.failed is not None:
            pub.check_writable(False)
        if w.in_group:
            raise ValueError("a new transaction began inside a chunk group")
        if w.segs.due():
            w.roll()
        start, done, total = 0, 0, len(frames)
        while start < total:
            with pub.lock:
                act = w.segs.act
                if act.size >= w.opts.segment_bytes and act.builder.count:
                    roll = True
                else:
                    roll = False
                    empty = not w.buf
                    start, n = _stamp(w, frames, start, gtids, done)
                    done += n
                    if empty:
                        w.buf_since = now = time.monotonic()
                        if w.dirty_since is None:
                            w.dirty_since = now
                            pub.flush_cond.notify()
            if roll:
                w.roll()
            elif w.buf_bytes >= WRITE_CHUNK:
                w.write_out()
                if w.unsynced > w.opts.max_pending_bytes:
                    w.wait_synced()
        return w.next_seq - 1


def _stamp(
    w: Writer, frames: memoryview, start: int, gtids: list[str] | None, done: int
) -> tuple[int, int]:
    """Stamp the frames from ``start`` that go in the active segment (under the lock);
    returns where they end and how many there were."""
    act = w.segs.act
    builder = act.builder
    opts = w.opts
    seq0, off0 = w.next_seq, act.size
    n, stop, ends, blocks, bb, mts = stamp(
        frames,
        start,
        seq0,
        off0,
        opts.segment_bytes,
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
        open_block(
            act, seq0 + i, at, (fixed[1], fixed[2], fixed[3], fixed[4]), fixed[5], max_before, leaf
        )
    gput(prev, n)
    last = _unpack_fixed(frames, (off0 if n == 1 else ends[n - 2]) - base + _PREFIX)
    end = ends[-1]
    act.last_pos = (last[1], last[2], last[3], last[4])
    act.last_seq = seq0 + n - 1
    act.size = end
    builder.block_bytes, builder.max_ts = bb, mts
    builder.count += n
    w.next_seq = seq0 + n
    w.buf.append(frames[start:stop])
    w.buf_bytes += end - off0
    w.buf_commit = (seq0 + n - 1, end)
    if opts.memory_tail_bytes > 0:
        _first, _base, recs, tends = w.tail
        run = FrameRun(frames, base, off0, seq0, ends)
        recs.extend([run] * n)
        tends.extend(ends)
        if end - w.tail_start > opts.memory_tail_bytes:
            w.trim_tail()
    return stop, n
