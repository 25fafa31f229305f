"""The change log: one writer appending records, any number of readers, in and out of process.

Write path. ``append_many`` (and ``append_nowait``, a batch of one) assigns seqs and frames
the records into an in-memory buffer for the active segment under one lock acquisition,
keeping per record only what the sparse index and the memory tail need (a byte count, the
running max timestamp, the GTID string). Writing never waits for a sync: the appending
thread itself hands the buffer to the OS (``os.writev``, no joining copy) whenever it holds
``WRITE_CHUNK`` bytes, and moves the *written mark* (segment, end offset, seq of the last
whole transaction written). The flusher thread (flusher.py) wakes every ``group_commit_ms``
(sooner once ``group_commit_bytes`` are unsynced), writes out a buffer an idle appender
left behind, and ``fdatasync``s up to the mark while appends go on into the page cache;
only then does it *publish*: ``acked_seq`` moves up, waiting appenders and in-process
readers are woken, and the ``head`` file is rewritten for readers in other processes.
``EVERY_RECORD`` syncs in ``append`` itself; ``NONE`` publishes right after the write.
Invariants:

* a record is visible to readers only once acknowledged, i.e. once its durability policy
  is met; the acknowledged point moves only at transaction ends, so the chunks of a large
  transaction become visible together and recovery may drop an unfinished chunk group;
* acknowledgement is monotone: a sync publishes its mark only if it is newer than what is
  already acknowledged (``flush``, the flusher and a segment roll may race);
* a segment is rolled only at a transaction boundary (so a chunk group never spans
  segments), when it reaches ``segment_bytes`` or ``roll_interval_s``; sealing writes the
  sealed index by temp file + rename, then the footer, fsyncs, and only then creates the
  next segment (fsync of the directory) — so at most the newest segment lacks a footer,
  and a segment with a footer always has its whole index. The old segment's descriptor is
  closed by the flusher, never under a sync that may still be running on it;
* locks: ``_alock`` (one appender at a time: appends, ``flush``, rolls) before ``_wlock``
  (the order of writes to the segment file) before ``_lock`` (state shared with readers
  and the flusher); nothing sleeps or syncs under ``_lock``. The segment list is
  copy-on-write, so readers work on a consistent snapshot.

Cross-process readers open the directory with ``read_only=True``: they take no lock, change
no file, and trust only what ``head`` says is acknowledged (catalog.py): CRCs alone cannot
tell an acknowledged record from a written but not yet synced one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from crc32c import crc32c

from headwater.errors import CorruptRecordError, StoreError
from headwater.position import Position
from headwater.store._fs import fsync_dir, write_all, writev_all
from headwater.store.bulk import FrameAppend, FrameRun
from headwater.store.catalog import (
    HEAD_NAME,
    ActiveState,
    Catalog,
    lock_dir,
    write_head,
)
from headwater.store.flusher import Flusher
from headwater.store.index import GtidSummary
from headwater.store.logread import ReadSide
from headwater.store.maintenance import Maintenance
from headwater.store.options import Durability, StoreOptions
from headwater.store.reader import EARLIEST, AtSeq, FileWatch, LogReader, Start
from headwater.store.record import (
    FIXED,
    FRAME,
    LEN_FIXED,
    MAGIC,
    MAX_BODY,
    PREFIX,
    Record,
    encode_tables,
)
from headwater.store.rolling import Rolling
from headwater.store.segment import IDX, SegmentMeta, segment_name

__all__ = ["ChangeLog", "LogInfo"]

log = logging.getLogger(__name__)

# The appending thread writes its buffer to the OS once it holds this many bytes: large
# enough for few system calls, small enough to stay in CPU caches and keep the flusher's
# syncs overlapping with appends.
WRITE_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class LogInfo:
    """Where one record sits: its seq, position, commit time and GTID."""

    seq: int
    position: Position
    ts_us: int
    gtid: str


@dataclass(frozen=True, slots=True)
class _Mark:
    """The end of the last whole transaction handed to the OS: what a sync makes durable."""

    base: int
    end: int
    seq: int
    fd: int


def _now_us() -> int:
    return time.time_ns() // 1000


class ChangeLog(Rolling, ReadSide, Maintenance, FrameAppend):
    """A change log directory. Create with :meth:`open`; close with :meth:`close`.

    This module is the writer and the segment list; the read side is in logread.py,
    retention and compression in maintenance.py, the group-commit thread in flusher.py,
    sealing and rolling segments in rolling.py, appending prebuilt frames in bulk.py.
    """

    def __init__(self, directory: str, options: StoreOptions, read_only: bool) -> None:
        self._dir = os.path.abspath(directory)
        self._opts = options
        self._read_only = read_only
        self._lock = threading.Lock()
        self._alock = threading.Lock()
        self._wlock = threading.Lock()
        self._maint_lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._flush_cond = threading.Condition(self._lock)
        self._catalog = Catalog(self._dir, options.index_interval_bytes, read_only=read_only)
        self._acked = 0
        self._pub_base = 1
        self._pub_end = 0
        self._closed = False
        self._failed: BaseException | None = None
        # The memory tail: records of the active segment from seq ``first`` on, and the
        # end offset of each (a reader's snapshot stays valid while the writer appends).
        self._tail: tuple[int, int, list[Record | FrameRun], list[int]] = (1, 1, [], [])
        self._tail_start = 0
        self._purged: GtidSummary = {}
        self._lock_fd = -1
        self._head_fd = -1
        self._watch: FileWatch | None = None
        self._flusher: Flusher | None = None
        self._maint_stop = threading.Event()
        self._maint_thread: threading.Thread | None = None

    # --- opening and closing ---------------------------------------------------------------

    @classmethod
    def open(
        cls, directory: str, options: StoreOptions | None = None, *, read_only: bool = False
    ) -> ChangeLog:
        """Open (creating if needed, unless ``read_only``) the log in ``directory``.

        The writer recovers the directory first (catalog.py); a reader in another process
        opens with ``read_only=True`` and sees what the writer has acknowledged.
        """
        self = cls(directory, options or StoreOptions(), read_only)
        if read_only:
            self._open_read_only()
        else:
            self._open_writer()
        self._load_purged()
        return self

    def _open_writer(self) -> None:
        os.makedirs(self._dir, exist_ok=True)
        self._lock_fd = lock_dir(self._dir)
        try:
            act = self._catalog.recover()
            self._start_active(act)
            self._next_seq = act.last_seq + 1
            self._acked = act.last_seq
            self._pub_base, self._pub_end = act.base, act.size
            self._head_fd = os.open(
                os.path.join(self._dir, HEAD_NAME), os.O_RDWR | os.O_CREAT, 0o644
            )
            write_head(self._head_fd, act.base, act.size, act.last_seq)
            fsync_dir(self._dir)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._buf: list[bytes | bytearray | memoryview] = []
        self._buf_bytes = 0
        self._buf_commit: tuple[int, int] | None = None
        self._written: _Mark | None = None
        self._unsynced = 0
        self._dirty_since: float | None = None
        self._buf_since = 0.0
        self._waiters = 0
        self._retired: list[int] = []
        self._in_group = False
        self._flusher = Flusher(self)
        self._flusher.start()
        interval = self._opts.maintenance_interval_s
        if interval is not None:
            self._maint_thread = threading.Thread(
                target=self._maintain_every,
                args=(interval, self._maint_stop),
                name=f"headwater-store-maintenance:{os.path.basename(self._dir)}",
                daemon=True,
            )
            self._maint_thread.start()

    def _start_active(self, act: ActiveState) -> None:
        self._act = act
        self._act_created = time.monotonic()
        self._tail = (act.last_seq + 1, act.base, [], [])
        self._tail_start = act.size
        path = os.path.join(self._dir, segment_name(act.base))
        self._wfd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._ifd = os.open(
            os.path.join(self._dir, segment_name(act.base, IDX)),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT,
            0o644,
        )

    def _open_read_only(self) -> None:
        path = os.path.join(self._dir, HEAD_NAME)
        try:
            self._head_fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise StoreError(f"{self._dir}: no change log here (no head file)") from None
        self._watch = FileWatch(path)
        self._pub_base = -1
        self._refresh()

    def close(self) -> None:
        """Flush and acknowledge everything appended, then release files and the lock."""
        if self._closed:
            return
        if not self._read_only:
            self._maint_stop.set()
            if self._maint_thread is not None:
                self._maint_thread.join()  # a round under way finishes first
            try:
                if self._failed is None:
                    self.flush()
            finally:
                with self._lock:
                    self._closed = True
                    self._flush_cond.notify_all()
                    self._cond.notify_all()
                if self._flusher is not None:
                    self._flusher.join()
                for fd in (*self._retired, self._wfd, self._ifd, self._head_fd, self._lock_fd):
                    os.close(fd)
                self._retired = []
        else:
            self._closed = True
            os.close(self._head_fd)
            if self._watch is not None:
                self._watch.close()

    def __enter__(self) -> ChangeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def acked_seq(self) -> int:
        """Seq of the last acknowledged (durable per policy, visible) record; 0 if none."""
        return self._acked

    @property
    def problems(self) -> list[CorruptRecordError]:
        """Damage found and worked around (segments set aside, indexes rebuilt)."""
        return list(self._catalog.problems)

    # --- appending -------------------------------------------------------------------------

    def append(self, record: Record, timeout: float | None = None) -> int:
        """Append and wait until acknowledged; returns the record's seq (also set on it).

        A non-final chunk of a chunked transaction is not waited for: the transaction is
        acknowledged with its last chunk. Raises StoreError if the log failed or
        ``timeout`` passed first.
        """
        seq = self.append_nowait(record)
        if record.flags & 2:
            durability = self._opts.durability
            if durability is Durability.EVERY_RECORD:
                self._sync_now()
            elif durability is Durability.NONE:
                with self._alock:
                    self._write_out()
            if not self.wait_acked(seq, timeout):
                raise StoreError(f"append of seq {seq} not acknowledged within {timeout}s")
        return seq

    def append_nowait(self, record: Record) -> int:
        """Queue a record for the next group commit; returns its seq without waiting.

        Use :meth:`wait_acked` or :attr:`acked_seq` to learn when it is acknowledged. The
        record object itself is kept in the memory tail and handed to in-process readers:
        do not change it after appending.
        """
        return self.append_many((record,))

    def append_many(self, records: Sequence[Record]) -> int:
        """Append records in order (whole transactions or chunks); returns the last seq.

        The cheap way to append several transactions at hand (one lock acquisition and
        one pass for the batch). Like :meth:`append_nowait` it does not wait: use
        :meth:`wait_acked` with the returned seq. A record that cannot be framed raises
        ``ValueError``; the records before it are appended.
        """
        with self._alock:
            if self._closed or self._failed is not None or self._read_only:
                self._check_writable()
            if not self._in_group and self._roll_due():
                self._roll()
            i, n = 0, len(records)
            while True:
                with self._lock:
                    empty = not self._buf
                    i, roll = self._encode(records, i)
                    if empty and self._buf:
                        self._buf_since = now = time.monotonic()
                        if self._dirty_since is None:
                            self._dirty_since = now
                            self._flush_cond.notify()
                if roll:
                    self._roll()
                elif self._buf_bytes >= WRITE_CHUNK:
                    self._write_out()
                    if self._unsynced > self._opts.max_pending_bytes:
                        self._wait_synced()
                elif i >= n:
                    return self._next_seq - 1

    def _encode(self, records: Sequence[Record], i: int) -> tuple[int, bool]:
        """Frame ``records[i:]`` into the buffer (under ``_lock``); return where it stopped.

        Stops early (second value True) before a transaction that must go to a new
        segment, or once the buffer holds ``WRITE_CHUNK`` bytes. This is the hot loop of
        the store: the frame is ``record.encode_parts`` inlined, the index bookkeeping is
        ``IndexBuilder.add`` inlined; all state is in locals and written back at the end.
        """
        opts = self._opts
        act = self._act
        builder = act.builder
        vseqs = builder.view.seqs
        put = self._buf.append
        gput = builder.gtids.append
        _first, _tbase, trecs, tends = self._tail
        tail_on = opts.memory_tail_bytes > 0
        pack = LEN_FIXED.pack
        ppack = PREFIX.pack
        seq0 = seq = self._next_seq
        off0 = off = act.size
        bb, mts, interval = builder.block_bytes, builder.max_ts, builder.interval
        seg_bytes, max_rec = opts.segment_bytes, opts.max_record_bytes
        chunk_end = off - self._buf_bytes + WRITE_CHUNK
        in_group = self._in_group
        commit: tuple[int, int] | None = None
        n = len(records)
        roll = False
        fixed, frame = FIXED.size, FRAME.size
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
                g = rec.gtid
                gtid = g.encode("ascii")
                glen = len(gtid)
                if glen > 255:
                    raise ValueError(f"GTID longer than 255 bytes: {g!r}")
                t = rec.tables
                tables = encode_tables(t) if t else b""
                tlen = len(tables)
                body_len = fixed + glen + tlen + plen
                if body_len > MAX_BODY:
                    raise ValueError(
                        f"record body of {body_len} bytes exceeds the {MAX_BODY} byte cap"
                    )
                pos = rec.position
                ts = rec.ts_us
                hdr = (
                    pack(
                        body_len,
                        seq,
                        pos.change_id,
                        pos.file_num,
                        pos.offset,
                        pos.event_index,
                        ts,
                        rec.schema_version,
                        flags,
                        glen,
                        len(t),
                        tlen,
                        rec.chunk_no,
                        0,
                    )
                    + gtid
                    + tables
                )
                put(ppack(MAGIC, crc32c(payload, crc32c(hdr))) + hdr)
                put(payload)
                flen = frame + body_len
                if bb >= interval or not vseqs:
                    pt = (pos.change_id, pos.file_num, pos.offset, pos.event_index)
                    if not vseqs:
                        act.first_pos, act.first_ts = pt, ts
                    builder.max_ts = mts
                    builder.open_block(seq, off, pt, ts)
                    bb = 0
                bb += flen
                if ts > mts:
                    mts = ts
                gput(g)
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
                self._next_seq = seq
                self._in_group = in_group
                self._buf_bytes += off - off0
                if commit is not None:
                    self._buf_commit = commit
                if tail_on and off - self._tail_start > opts.memory_tail_bytes:
                    self._trim_tail()
        return i, roll

    def _trim_tail(self) -> None:
        """Drop the older half of the memory tail (amortized O(1) per record)."""
        first, base, recs, ends = self._tail
        k = len(recs) // 2
        if k == 0:
            return
        self._tail_start = ends[k - 1]
        self._tail = (first + k, base, recs[k:], ends[k:])

    def _write_out(self) -> None:
        """Hand the buffer to the OS and move the written mark (``_alock`` or flusher)."""
        with self._wlock:
            self._write_out_locked()

    def _write_out_locked(self) -> None:
        with self._lock:
            if not self._buf:
                return
            pieces, self._buf = self._buf, []
            nbytes, self._buf_bytes = self._buf_bytes, 0
            commit, self._buf_commit = self._buf_commit, None
            base, fd = self._act.base, self._wfd
            idx = self._act.builder.take_unwritten()
        try:
            writev_all(fd, pieces)
            if idx:
                write_all(self._ifd, idx)
        except BaseException as e:
            raise self._fail(e) from e
        with self._lock:
            self._unsynced += nbytes
            if commit is not None:
                self._written = _Mark(base, commit[1], commit[0], fd)
            if self._dirty_since is None:
                self._dirty_since = time.monotonic()
                self._flush_cond.notify()
            elif self._unsynced >= self._opts.group_commit_bytes:
                self._flush_cond.notify()
        if commit is not None and self._opts.durability is Durability.NONE:
            self._publish(base, commit[1], commit[0])

    def _wait_synced(self) -> None:
        """Back-pressure: the disk is ``max_pending_bytes`` behind; wait for a sync."""
        with self._cond:
            self._flush_cond.notify()
            self._cond.wait_for(
                lambda: (
                    self._unsynced <= self._opts.max_pending_bytes
                    or self._failed is not None
                    or self._closed
                ),
                1.0,
            )

    def _sync_now(self) -> None:
        """Write and sync everything appended so far in this thread, and publish it."""
        with self._alock:
            self._write_out()
            with self._lock:
                mark = self._written
            if mark is None:
                return
            try:
                os.fdatasync(mark.fd)
            except BaseException as e:
                raise self._fail(e) from e
            self._publish(mark.base, mark.end, mark.seq)

    def _publish(self, base: int, end: int, seq: int) -> None:
        """Acknowledge up to ``seq`` (which sits at ``end`` of segment ``base``)."""
        with self._lock:
            if seq <= self._acked:
                return
            self._acked, self._pub_base, self._pub_end = seq, base, end
            write_head(self._head_fd, base, end, seq)
            self._cond.notify_all()

    def _fail(self, e: BaseException) -> StoreError:
        with self._lock:
            if self._failed is None:
                self._failed = e
            self._cond.notify_all()
            self._flush_cond.notify_all()
        log.exception("change log write failed; the log refuses further appends")
        return StoreError(f"{self._dir}: write failed: {e}")

    def append_chunked(
        self, header: Record, chunks: list[bytes] | tuple[bytes, ...], timeout: float | None = None
    ) -> int:
        """Append one large transaction as chunk records sharing ``header``'s metadata.

        For streaming without holding all chunks, call :meth:`append` per chunk with
        ``flags`` FIRST_CHUNK / 0 / LAST_CHUNK and ``chunk_no`` 0, 1, 2, ... instead.
        Returns the seq of the last chunk.
        """
        seq = 0
        n = len(chunks)
        for i, chunk in enumerate(chunks):
            flags = (1 if i == 0 else 0) | (2 if i == n - 1 else 0)
            rec = Record(
                header.position,
                chunk,
                header.ts_us,
                header.gtid,
                header.tables,
                header.schema_version,
                flags,
                i,
            )
            seq = self.append(rec, timeout) if flags & 2 else self.append_nowait(rec)
        return seq

    def wait_acked(self, seq: int, timeout: float | None = None) -> bool:
        """Wait until ``seq`` is acknowledged; False on timeout. Raises if the log failed.

        A waiter cuts the group-commit window short: the flusher writes out what the
        appending thread still buffers and syncs at once (appends go on meanwhile).
        """
        with self._cond:
            if self._acked < seq:
                self._waiters += 1
                self._flush_cond.notify()
                try:
                    ok = self._cond.wait_for(
                        lambda: self._acked >= seq or self._failed is not None or self._closed,
                        timeout,
                    )
                finally:
                    self._waiters -= 1
            else:
                ok = True
            if self._failed is not None:
                raise StoreError(f"{self._dir}: the log failed: {self._failed}")
            return ok and self._acked >= seq

    def flush(self) -> None:
        """Write and sync everything appended so far (even under ``NONE``), acknowledging it."""
        self._check_writable()
        self._sync_now()

    def _check_writable(self) -> None:
        if self._read_only:
            raise StoreError(f"{self._dir}: opened read-only")
        if self._closed:
            raise StoreError(f"{self._dir}: the log is closed")
        if self._failed is not None:
            raise StoreError(f"{self._dir}: the log failed: {self._failed}")

    # --- reading ---------------------------------------------------------------------------

    def reader(self, start: Start = EARLIEST) -> LogReader:
        """An iterator over acknowledged records from ``start`` (see reader.py)."""
        if self._read_only:
            self._refresh()
        return LogReader(self, start)

    def earliest(self) -> LogInfo | None:
        """The first retained record, or None if the log is empty."""
        with self.reader(EARLIEST) as r:
            rec = r.next(0)
        return None if rec is None else LogInfo(rec.seq, rec.position, rec.ts_us, rec.gtid)

    def latest(self) -> LogInfo | None:
        """The last acknowledged record, or None if the log is empty."""
        if self._read_only:
            self._refresh()
        seq = self._acked
        if seq < self._earliest_seq():
            return None
        with self.reader(AtSeq(seq)) as r:
            rec = r.next(0)
        return None if rec is None else LogInfo(rec.seq, rec.position, rec.ts_us, rec.gtid)

    def segments(self) -> list[SegmentMeta]:
        """The segments as the top-level index sees them (oldest first)."""
        return list(self._catalog.segments)
