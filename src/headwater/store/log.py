"""The change log: one writer appending records, any number of readers, in and out of process.

Write path. ``append_nowait`` assigns the next seq, frames the record into an in-memory
batch for the active segment, updates the segment's index builder and the memory tail, and
returns. A flusher thread (and ``append`` itself for the ``EVERY_RECORD`` / ``NONE``
policies, and ``flush``) takes the whole batch and writes it with one ``os.write``, then
``fdatasync`` (unless ``NONE``), and only then *publishes*: ``acked_seq`` moves up, waiting
appenders and in-process readers are woken, and the ``head`` file is rewritten for readers
in other processes. Invariants:

* a record is visible to readers only once acknowledged, i.e. once its durability policy
  is met; the acknowledged point moves only at transaction ends, so the chunks of a large
  transaction become visible together and recovery may drop an unfinished chunk group;
* a segment is rolled only at a transaction boundary (so a chunk group never spans
  segments), when it reaches ``segment_bytes`` or ``roll_interval_s``; sealing writes the
  sealed index by temp file + rename, then the footer, fsyncs, and only then creates the
  next segment (fsync of the directory) — so at most the newest segment lacks a footer,
  and a segment with a footer always has its whole index;
* I/O happens under ``_io_lock`` and state changes under ``_lock``, always taken in that
  order; the segment list is copy-on-write, so readers work on a consistent snapshot.

Cross-process readers open the directory with ``read_only=True``: they take no lock, change
no file, and trust only what ``head`` says is acknowledged (catalog.py): CRCs alone cannot
tell an acknowledged record from a written but not yet synced one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass

from headwater.errors import CorruptRecordError, PositionNotRetainedError, StoreError
from headwater.position import Position
from headwater.store._fs import atomic_write, fsync_dir
from headwater.store.catalog import (
    HEAD_NAME,
    ActiveState,
    Catalog,
    lock_dir,
    read_head,
    seal_footer,
    write_head,
)
from headwater.store.index import (
    GtidSummary,
    IndexBuilder,
    IndexView,
    PosTuple,
    encode_trailer,
    merge_summaries,
)
from headwater.store.options import Durability, StoreOptions
from headwater.store.reader import EARLIEST, AtSeq, FileWatch, LogReader, Start
from headwater.store.record import Record, encode_parts
from headwater.store.retention import plan_compression, plan_retention
from headwater.store.segment import (
    IDX,
    ZSEG,
    Footer,
    SegmentMeta,
    Source,
    compress_segment,
    encode_footer_tail,
    open_source,
    read_footer,
    read_record,
    segment_name,
)

__all__ = ["ChangeLog", "LogInfo"]

log = logging.getLogger(__name__)

PURGED_NAME = "purged"
_Item = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class LogInfo:
    """Where one record sits: its seq, position, commit time and GTID."""

    seq: int
    position: Position
    ts_us: int
    gtid: str


def _now_us() -> int:
    return time.time_ns() // 1000


IOV_MAX = 1024


def _writev_all(fd: int, pieces: list[bytes]) -> None:
    """Write the pieces in order with as few system calls as possible (no joining copy)."""
    for i in range(0, len(pieces), IOV_MAX):
        batch = pieces[i : i + IOV_MAX]
        n = os.writev(fd, batch)
        total = sum(len(b) for b in batch)
        if n < total:  # a short write (rare for files): finish the rest plainly
            _write_all(fd, b"".join(batch)[n:])


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class ChangeLog:
    """A change log directory. Create with :meth:`open`; close with :meth:`close`."""

    def __init__(self, directory: str, options: StoreOptions, read_only: bool) -> None:
        self._dir = os.path.abspath(directory)
        self._opts = options
        self._read_only = read_only
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._maint_lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._flush_cond = threading.Condition(self._lock)
        self._catalog = Catalog(self._dir, options.index_interval_bytes, read_only=read_only)
        self._acked = 0
        self._pub_base = 1
        self._pub_end = 0
        self._closed = False
        self._failed: BaseException | None = None
        self._tail: dict[int, tuple[Record, int, int, int]] = {}
        self._tail_first = 1
        self._tail_bytes = 0
        self._purged: GtidSummary = {}
        self._lock_fd = -1
        self._head_fd = -1
        self._watch: FileWatch | None = None
        self._flusher: threading.Thread | None = None

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
            self._tail_first = self._next_seq
            self._pub_base, self._pub_end = act.base, act.size
            self._head_fd = os.open(
                os.path.join(self._dir, HEAD_NAME), os.O_RDWR | os.O_CREAT, 0o644
            )
            write_head(self._head_fd, act.base, act.size, act.last_seq)
            fsync_dir(self._dir)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._buf: list[bytes] = []
        self._buf_commit: tuple[int, int] | None = None
        self._queue: list[_Item] = []
        self._pending = 0
        self._pending_since: float | None = None
        self._in_group = False
        self._kicked = False
        self._tail_limit = self._opts.memory_tail_bytes
        self._flusher = threading.Thread(
            target=self._run_flusher, name="headwater-store-flush", daemon=True
        )
        self._flusher.start()

    def _start_active(self, act: ActiveState) -> None:
        self._act = act
        self._act_created = time.monotonic()
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
                for fd in (self._wfd, self._ifd, self._head_fd, self._lock_fd):
                    os.close(fd)
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
        if record.last_chunk:
            if self._opts.durability is not Durability.GROUP:
                self._flush()
            if not self.wait_acked(seq, timeout):
                raise StoreError(f"append of seq {seq} not acknowledged within {timeout}s")
        return seq

    def append_nowait(self, record: Record) -> int:
        """Queue a record for the next group commit; returns its seq without waiting.

        Use :meth:`wait_acked` or :attr:`acked_seq` to learn when it is acknowledged. The
        record object itself is kept in the memory tail and handed to in-process readers:
        do not change it after appending.
        """
        opts = self._opts
        if len(record.payload) > opts.max_record_bytes:
            raise ValueError(
                f"payload of {len(record.payload)} bytes exceeds max_record_bytes "
                f"({opts.max_record_bytes}); append it in chunks"
            )
        flags = record.flags
        with self._lock:
            if self._closed or self._failed is not None or self._read_only:
                self._check_writable()
            if flags & 1:
                if self._in_group:
                    raise ValueError(
                        "a new transaction began before the last chunk of the previous one"
                    )
                if self._should_roll():
                    self._enqueue_roll()
            elif not self._in_group:
                raise ValueError("a continuation chunk without a first chunk")
            seq = self._next_seq
            head, payload, flen = encode_parts(record, seq)
            act = self._act
            off = act.size
            buf = self._buf
            buf.append(head)
            buf.append(payload)
            act.size = off + flen
            p = record.position
            pt = (p.change_id, p.file_num, p.offset, p.event_index)
            builder = act.builder
            if builder.count == 0:
                act.first_pos, act.first_ts = pt, record.ts_us
            builder.add(seq, off, pt, record.ts_us, record.gtid, flen)
            act.last_pos, act.last_seq = pt, seq
            self._next_seq = seq + 1
            record.seq = seq
            if flags & 2:
                self._in_group = False
                self._buf_commit = (seq, act.size)
            else:
                self._in_group = True
            if self._tail_limit:
                self._tail_add(seq, record, act.base, off, flen)
            pending = self._pending + flen
            self._pending = pending
            if self._pending_since is None:
                self._pending_since = time.monotonic()
                self._flush_cond.notify()
            elif pending >= opts.group_commit_bytes and not self._kicked:
                self._kicked = True
                self._flush_cond.notify()
            over = pending >= opts.max_pending_bytes
        if over:
            self._flush()
        return seq

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
        """Wait until ``seq`` is acknowledged; False on timeout. Raises if the log failed."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._acked >= seq or self._failed is not None or self._closed, timeout
            )
            if self._failed is not None:
                raise StoreError(f"{self._dir}: the log failed: {self._failed}")
            return ok and self._acked >= seq

    def flush(self) -> None:
        """Write and sync everything appended so far (even under ``NONE``), acknowledging it."""
        self._check_writable()
        self._flush(force_sync=True)

    def _check_writable(self) -> None:
        if self._read_only:
            raise StoreError(f"{self._dir}: opened read-only")
        if self._closed:
            raise StoreError(f"{self._dir}: the log is closed")
        if self._failed is not None:
            raise StoreError(f"{self._dir}: the log failed: {self._failed}")

    def _should_roll(self) -> bool:
        act = self._act
        if act.size >= self._opts.segment_bytes:
            return act.builder.count > 0
        ival = self._opts.roll_interval_s
        return (
            ival is not None
            and act.builder.count > 0
            and time.monotonic() - self._act_created >= ival
        )

    def _close_buf(self) -> None:
        if self._buf:
            self._queue.append(
                (
                    "data",
                    self._act.base,
                    self._buf,
                    self._buf_commit,
                    self._act.builder.take_unwritten(),
                )
            )
            self._buf = []
            self._buf_commit = None

    def _enqueue_roll(self) -> None:
        act = self._act
        self._close_buf()
        footer = seal_footer(act.base, act, _now_us())
        entries = act.builder.seal()
        self._queue.append(("seal", act.base, footer, entries, act.builder.view))
        base = self._next_seq
        self._queue.append(("new", base))
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

    def _tail_add(self, seq: int, rec: Record, base: int, off: int, flen: int) -> None:
        limit = self._opts.memory_tail_bytes
        if limit <= 0:
            return
        self._tail[seq] = (rec, base, off, flen)
        self._tail_bytes += flen
        tail = self._tail
        while self._tail_bytes > limit and self._tail_first < seq:
            old = tail.pop(self._tail_first, None)
            if old is not None:
                self._tail_bytes -= old[3]
            self._tail_first += 1

    # --- the flusher -----------------------------------------------------------------------

    def _run_flusher(self) -> None:
        group_s = self._opts.group_commit_ms / 1000.0
        while True:
            with self._lock:
                while self._pending_since is None and not self._closed:
                    self._flush_cond.wait()
                if self._closed or self._pending_since is None:
                    return
                deadline = self._pending_since + group_s
                while (
                    self._pending_since is not None
                    and not self._closed
                    and self._pending < self._opts.group_commit_bytes
                ):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._flush_cond.wait(remaining)
            try:
                self._flush()
            except StoreError:
                return

    def _flush(self, force_sync: bool = False) -> None:
        with self._io_lock:
            with self._lock:
                self._close_buf()
                items, self._queue = self._queue, []
                self._pending = 0
                self._pending_since = None
                self._kicked = False
            if not items and not force_sync:
                return
            try:
                self._process(items, force_sync)
            except BaseException as e:
                with self._lock:
                    self._failed = e
                    self._cond.notify_all()
                log.exception("change log write failed; the log refuses further appends")
                raise StoreError(f"{self._dir}: write failed: {e}") from e

    def _process(self, items: list[_Item], force_sync: bool) -> None:
        dirty = force_sync
        commit: tuple[int, tuple[int, int]] | None = None
        for item in items:
            if item[0] == "data":
                _k, base, data, c, idx = item
                assert isinstance(data, list) and isinstance(idx, bytes)
                _writev_all(self._wfd, data)
                if idx:
                    _write_all(self._ifd, idx)
                dirty = True
                if c is not None:
                    assert isinstance(base, int) and isinstance(c, tuple)
                    commit = (base, c)
                continue
            if dirty:
                self._sync_publish(commit, force_sync)
                dirty, commit = False, None
            if item[0] == "seal":
                _k, base, footer, entries, view = item
                assert isinstance(base, int) and isinstance(footer, Footer)
                assert isinstance(entries, bytes) and isinstance(view, IndexView)
                self._do_seal(base, footer, entries, view)
            else:
                assert isinstance(item[1], int)
                self._do_new(item[1])
        if dirty:
            self._sync_publish(commit, force_sync)

    def _sync_publish(self, commit: tuple[int, tuple[int, int]] | None, force: bool) -> None:
        if force or self._opts.durability is not Durability.NONE:
            os.fdatasync(self._wfd)
        if commit is None:
            return
        base, (seq, end) = commit
        with self._lock:
            self._acked, self._pub_base, self._pub_end = seq, base, end
            self._cond.notify_all()
        write_head(self._head_fd, base, end, seq)

    def _do_seal(self, base: int, footer: Footer, entries: bytes, view: IndexView) -> None:
        # The sealed index goes in place before the footer: once a footer exists, its
        # index is whole (a crash in between leaves an unsealed segment, rebuilt anyway).
        os.close(self._ifd)
        idx = os.path.join(self._dir, segment_name(base, IDX))
        atomic_write(
            idx,
            entries + encode_trailer(entries, len(entries) // 94, footer.last_seq, footer.data_end),
        )
        _write_all(self._wfd, encode_footer_tail(footer))
        os.fsync(self._wfd)
        size = os.fstat(self._wfd).st_size
        os.close(self._wfd)
        self._wfd = self._ifd = -1
        with self._lock:
            meta = self._catalog.find(base)
            assert meta is not None and meta.base == base
            meta.file_bytes = size
            meta.footer = footer
            self._catalog.cache_view(base, view)

    def _do_new(self, base: int) -> None:
        path = os.path.join(self._dir, segment_name(base))
        self._wfd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        self._ifd = os.open(
            os.path.join(self._dir, segment_name(base, IDX)),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC,
            0o644,
        )
        fsync_dir(self._dir)
        with self._lock:
            segs = self._catalog.segments
            self._catalog.segments = [*segs, SegmentMeta(base, path, None, 0)]
            self._pub_base, self._pub_end = base, 0
            self._cond.notify_all()
        write_head(self._head_fd, base, 0, self._acked)

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

    # Internals used by reader.py.

    def _segments_snapshot(self) -> list[SegmentMeta]:
        return self._catalog.segments

    def _earliest_seq(self) -> int:
        return self._catalog.earliest_seq()

    def _visible_for(self, seq: int) -> int:
        if self._read_only and seq > self._acked:
            self._refresh()
        return self._acked

    def _tail_get(self, seq: int) -> tuple[Record, int, int, int] | None:
        return self._tail.get(seq)

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

    # --- retention and compression ---------------------------------------------------------

    def apply_retention(self, now_us: int | None = None) -> list[str]:
        """Delete whole sealed segments beyond the retention age or size; return their paths."""
        self._check_writable()
        now = _now_us() if now_us is None else now_us
        with self._maint_lock:
            doomed = plan_retention(
                self._catalog.segments,
                now,
                max_age_s=self._opts.retention_age_s,
                max_bytes=self._opts.retention_bytes,
            )
            if not doomed:
                return []
            purged = self._purged
            for meta in doomed:
                assert meta.footer is not None
                purged = merge_summaries(purged, meta.footer.summary)
            self._save_purged(purged)
            for meta in doomed:
                with self._lock:
                    self._catalog.replace(meta, None)
                    self._catalog.drop_view(meta.base)
                for path in (meta.index_path, meta.path):
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        log.warning("retention: %s was already gone", path)
            fsync_dir(self._dir)
            log.info(
                "retention deleted %d segments up to seq %d",
                len(doomed),
                doomed[-1].footer.last_seq if doomed[-1].footer else 0,
            )
            return [m.path for m in doomed]

    def compress_sealed(self, now_us: int | None = None) -> list[str]:
        """zstd-compress sealed segments older than ``compress_after_s``; return new paths."""
        self._check_writable()
        now = _now_us() if now_us is None else now_us
        done: list[str] = []
        with self._maint_lock:
            for meta in plan_compression(
                self._catalog.segments, now, after_s=self._opts.compress_after_s
            ):
                assert meta.footer is not None
                zpath = os.path.join(self._dir, segment_name(meta.base, ZSEG))
                tmp = zpath + ".tmp"
                size = compress_segment(
                    meta.path,
                    tmp,
                    meta.footer,
                    block_bytes=self._opts.compress_block_bytes,
                    level=self._opts.compress_level,
                )
                os.replace(tmp, zpath)
                fsync_dir(self._dir)
                with self._lock:
                    self._catalog.replace(meta, SegmentMeta(meta.base, zpath, meta.footer, size))
                os.unlink(meta.path)
                fsync_dir(self._dir)
                done.append(zpath)
        return done

    def _save_purged(self, summary: GtidSummary) -> None:
        items = (
            None
            if summary is None
            else [[k, i.hex(), lo, hi] for (k, i), (lo, hi) in sorted(summary.items())]
        )
        atomic_write(os.path.join(self._dir, PURGED_NAME), json.dumps({"items": items}).encode())
        self._purged = summary

    def _load_purged(self) -> None:
        try:
            with open(os.path.join(self._dir, PURGED_NAME), "rb") as f:
                items = json.loads(f.read())["items"]
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as e:
            self._catalog.problems.append(
                CorruptRecordError(
                    f"purged-GTID summary unreadable: {e}", path=PURGED_NAME, offset=0
                )
            )
            self._purged = None
            return
        self._purged = (
            None
            if items is None
            else {(int(k), bytes.fromhex(i)): (int(lo), int(hi)) for k, i, lo, hi in items}
        )

    # --- checking --------------------------------------------------------------------------

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
