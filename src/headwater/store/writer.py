"""The write path of a change log: seqs, frames, the write buffer, the memory tail, rolls.

``Writer.append_many`` assigns seqs and frames records into an in-memory buffer for the
active segment under one lock acquisition, keeping per record only what the sparse index
and the memory tail need (a byte count, the running max timestamp, the GTID string).
Writing never waits for a sync: the appending thread itself hands the buffer to the OS
(``os.writev``, no joining copy) whenever it holds ``WRITE_CHUNK`` bytes, and moves the
*written mark* (segment, end offset, seq of the last whole transaction written). The
flusher (flusher.py) syncs up to the mark and publishes it (published.py); frames built
by the compiled reader are appended by bulk.py through the same buffer and index.

The writer owns: the buffer and its bookkeeping, the written mark and the unsynced byte
count, the next seq, whether a chunk group is open, the memory tail (records of the active
segment from seq ``first`` on, and the end offset of each, so a reader's snapshot stays
valid while the writer appends), and the active segment (rolling.py). Invariants:

* a record is visible to readers only once acknowledged; acknowledgement moves only at
  transaction ends, so the chunks of a large transaction become visible together;
* a segment is rolled only at a transaction boundary, when it reaches ``segment_bytes``
  or ``roll_interval_s``;
* locks: ``alock`` (one appender at a time: appends, ``flush``, rolls) before ``wlock``
  (the order of writes to the segment file) before the published lock (state shared with
  readers and the flusher); nothing sleeps or syncs under the published lock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headwater.store._fs import write_all, writev_all
from headwater.store.catalog import ActiveState, Catalog, write_head
from headwater.store.options import Durability, StoreOptions
from headwater.store.published import Published
from headwater.store.record import Record, frame_head
from headwater.store.rolling import Segments

if TYPE_CHECKING:
    from headwater.store.bulk import FrameRun
    from headwater.store.index import PosTuple

__all__ = ["WRITE_CHUNK", "Mark", "Writer", "open_block"]

# The appending thread writes its buffer to the OS once it holds this many bytes: large
# enough for few system calls, small enough to stay in CPU caches and keep the flusher's
# syncs overlapping with appends.
WRITE_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Mark:
    """The end of the last whole transaction handed to the OS: what a sync makes durable."""

    base: int
    end: int
    seq: int
    fd: int


def open_block(
    act: ActiveState,
    seq: int,
    off: int,
    pt: PosTuple,
    ts: int,
    max_before: int,
    leaf: tuple[int, int, int] | None = None,
) -> None:
    """Start a sparse-index block at record ``seq`` (segment offset ``off``): the one place
    the writer's index bookkeeping happens, for records (``Writer.encode``) and for
    prebuilt frames (bulk.py) alike. ``max_before``: the max timestamp of everything
    before it; the segment's first record also sets its first position and time."""
    builder = act.builder
    if not builder.view.seqs:
        act.first_pos, act.first_ts = pt, ts
    builder.max_ts = max_before
    builder.open_block(seq, off, pt, ts, leaf)


class Writer:
    """The write side of a writable log (see the module docstring)."""

    def __init__(
        self, options: StoreOptions, pub: Published, catalog: Catalog, act: ActiveState
    ) -> None:
        self.opts = options
        self.pub = pub
        self.catalog = catalog
        self.alock = threading.Lock()
        self.wlock = threading.Lock()
        self.segs = Segments(pub.dir, options, catalog)
        self.segs.start(act)
        self.next_seq = act.last_seq + 1
        self.buf: list[bytes | bytearray | memoryview] = []
        self.buf_bytes = 0
        self.buf_commit: tuple[int, int] | None = None
        self.buf_since = 0.0
        self.dirty_since: float | None = None
        self.written: Mark | None = None
        self.unsynced = 0
        self.waiters = 0
        self.in_group = False
        self.tail: tuple[int, int, list[Record | FrameRun], list[int]] = (
            act.last_seq + 1,
            act.base,
            [],
            [],
        )
        self.tail_start = act.size

    # --- appending records -----------------------------------------------------------------

    def append_many(self, records: Sequence[Record]) -> int:
        """See :meth:`ChangeLog.append_many`."""
        pub = self.pub
        with self.alock:
            if pub.closed or pub.failed is not None:
                pub.check_writable(False)
            if not self.in_group and self.segs.due():
                self.roll()
            i, n = 0, len(records)
            while True:
                with pub.lock:
                    empty = not self.buf
                    i, roll = self.encode(records, i)
                    if empty and self.buf:
                        self.buf_since = now = time.monotonic()
                        if self.dirty_since is None:
                            self.dirty_since = now
                            pub.flush_cond.notify()
                if roll:
                    self.roll()
                elif self.buf_bytes >= WRITE_CHUNK:
                    self.write_out()
                    if self.unsynced > self.opts.max_pending_bytes:
                        self.wait_synced()
                elif i >= n:
                    return self.next_seq - 1

    def encode(self, records: Sequence[Record], i: int) -> tuple[int, bool]:
        """Frame ``records[i:]`` into the buffer (under the lock); return where it stopped.

        Stops early (second value True) before a transaction that must go to a new
        segment, or once the buffer holds ``WRITE_CHUNK`` bytes. This is the hot loop of
        the store: frames come from record.py's one encoder (``frame_head``), index blocks
        open through :func:`open_block`; the per-record state stays in locals and is
        written back at the end.
        """
        opts = self.opts
        act = self.segs.act
        builder = act.builder
        vseqs = builder.view.seqs
        put = self.buf.append
        gput = builder.gtids.append
        _first, _tbase, trecs, tends = self.tail
        tail_on = opts.memory_tail_bytes > 0
        seq0 = seq = self.next_seq
        off0 = off = act.size
        bb, mts, interval = builder.block_bytes, builder.max_ts, builder.interval
        seg_bytes, max_rec = opts.segment_bytes, opts.max_record_bytes
        chunk_end = off - self.buf_bytes + WRITE_CHUNK
        in_group = self.in_group
        commit: tuple[int, int] | None = None
        n = len(records)
        roll = False
        head = frame_head
        try:
            while i < n:
                rec = records[i]
                flags = rec.flags
                if flags & 1:
                    if in_group:
                        raise ValueError(
                            "a new transaction began before the last chunk of the previous one"
                        )
                    if off >= seg_bytes:
                        roll = True
                        break
                elif not in_group:
                    raise ValueError("a continuation chunk without a first chunk")
                payload = rec.payload
                plen = len(payload)
                if plen > max_rec:
                    raise ValueError(
                        f"payload of {plen} bytes exceeds max_record_bytes "
                        f"({max_rec}); append it in chunks"
                    )
                prefix = head(rec, seq)
                put(prefix)
                put(payload)
                flen = len(prefix) + plen
                ts = rec.ts_us
                if bb >= interval or not vseqs:
                    pos = rec.position
                    pt = (pos.change_id, pos.file_num, pos.offset, pos.event_index)
                    open_block(act, seq, off, pt, ts, mts)
                    bb = 0
                bb += flen
                if ts > mts:
                    mts = ts
                gput(rec.gtid)
                rec.seq = seq
                off += flen
                if tail_on:
                    trecs.append(rec)
                    tends.append(off)
                if flags & 2:
                    in_group = False
                    commit = (seq, off)
                else:
                    in_group = True
                seq += 1
                i += 1
                if off >= chunk_end:
                    break
        finally:
            if seq != seq0:
                last = records[i - 1].position
                act.last_pos = (last.change_id, last.file_num, last.offset, last.event_index)
                act.last_seq = seq - 1
                act.size = off
                builder.block_bytes, builder.max_ts = bb, mts
                builder.count += seq - seq0
                self.next_seq = seq
                self.in_group = in_group
                self.buf_bytes += off - off0
                if commit is not None:
                    self.buf_commit = commit
                if tail_on and off - self.tail_start > opts.memory_tail_bytes:
                    self.trim_tail()
        return i, roll

    def trim_tail(self) -> None:
        """Drop the older half of the memory tail (amortized O(1) per record)."""
        first, base, recs, ends = self.tail
        k = len(recs) // 2
        if k == 0:
            return
        self.tail_start = ends[k - 1]
        self.tail = (first + k, base, recs[k:], ends[k:])

    # --- writing and syncing ---------------------------------------------------------------

    def write_out(self) -> None:
        """Hand the buffer to the OS and move the written mark (``alock`` or flusher)."""
        with self.wlock:
            self.write_out_locked()

    def write_out_locked(self) -> None:
        pub = self.pub
        with pub.lock:
            if not self.buf:
                return
            pieces, self.buf = self.buf, []
            nbytes, self.buf_bytes = self.buf_bytes, 0
            commit, self.buf_commit = self.buf_commit, None
            base, fd, ifd = self.segs.act.base, self.segs.wfd, self.segs.ifd
            idx = self.segs.act.builder.take_unwritten()
        try:
            writev_all(fd, pieces)
            if idx:
                write_all(ifd, idx)
        except BaseException as e:
            raise pub.fail(e) from e
        with pub.lock:
            self.unsynced += nbytes
            if commit is not None:
                self.written = Mark(base, commit[1], commit[0], fd)
            if self.dirty_since is None:
                self.dirty_since = time.monotonic()
                pub.flush_cond.notify()
            elif self.unsynced >= self.opts.group_commit_bytes:
                pub.flush_cond.notify()
        if commit is not None and self.opts.durability is Durability.NONE:
            pub.publish(base, commit[1], commit[0])

    def wait_synced(self) -> None:
        """Back-pressure: the disk is ``max_pending_bytes`` behind; wait for a sync."""
        pub = self.pub
        with pub.cond:
            pub.flush_cond.notify()
            pub.cond.wait_for(
                lambda: (
                    self.unsynced <= self.opts.max_pending_bytes
                    or pub.failed is not None
                    or pub.closed
                ),
                1.0,
            )

    def sync_now(self) -> None:
        """Write and sync everything appended so far in this thread, and publish it."""
        with self.alock:
            self.write_out()
            with self.pub.lock:
                mark = self.written
            if mark is None:
                return
            try:
                os.fdatasync(mark.fd)
            except BaseException as e:
                raise self.pub.fail(e) from e
            self.pub.publish(mark.base, mark.end, mark.seq)

    # --- rolling ---------------------------------------------------------------------------

    def roll(self) -> None:
        """Seal the active segment and start the next one (appending thread, ``alock``)."""
        pub, segs = self.pub, self.segs
        with self.wlock:
            self.write_out_locked()
            with pub.lock:
                sealing = segs.begin_seal()
            try:
                size, wfd, ifd = segs.write_seal(sealing)
            except BaseException as e:
                raise pub.fail(e) from e
            with pub.lock:
                base = segs.start_next(sealing, size, wfd, ifd)
                self.tail = (base, base, [], [])
                self.tail_start = 0
                # Everything of the old segment is durable now (fsync in write_seal).
                self.written = None
                self.unsynced = 0
                pub.acked = max(pub.acked, sealing.footer.last_seq)
                pub.base, pub.end = base, 0
                write_head(pub.head_fd, base, 0, pub.acked)
                pub.cond.notify_all()

    def roll_if_idle(self) -> None:
        """Flusher: roll an idle log whose active segment is old enough (time-based roll).

        If an appender is busy it rolls by itself at its next call; the flusher does not
        wait for it.
        """
        pub = self.pub
        with pub.lock:
            if not self.segs.timer_due():
                return
        if not self.alock.acquire(blocking=False):
            return
        try:
            if not pub.closed and pub.failed is None and not self.in_group and self.segs.due():
                self.roll()
        finally:
            self.alock.release()
