"""The change log: one writer appending records, any number of readers, in and out of process.

:class:`ChangeLog` is the public face of a log directory. It owns one object per concern,
each with its own state, and wires them; the dependencies go one way (published <- rolling
<- writer <- bulk, flusher; maintenance; read side <- cursor):

* :class:`~headwater.store.published.Published` (published.py): the acknowledged point,
  closed/failed, the ``head`` file and the condition variables;
* :class:`~headwater.store.writer.Writer` (writer.py): seqs, framing, the write buffer,
  the memory tail, and the active segment and its rotation
  (:class:`~headwater.store.rolling.Segments`, rolling.py); frames built by the compiled
  reader go through ``bulk.append_frames`` (bulk.py); the group-commit thread is
  flusher.py. Only a writable log has one;
* :class:`~headwater.store.maintenance.Maintenance` (maintenance.py): retention,
  compression, the purged-GTID summary, their background thread;
* :class:`~headwater.store.logread.ReadSide` (logread.py): what cursors (cursor.py) ask
  the log, from memory in the writer's process, from ``head`` and the listing elsewhere;
* :class:`~headwater.store.catalog.Catalog` (catalog.py): the segment list (copy-on-write,
  so readers work on a consistent snapshot) and recovery.

Durability. The flusher wakes every ``group_commit_ms`` (sooner once
``group_commit_bytes`` are unsynced), writes out a buffer an idle appender left behind, and
``fdatasync``s up to the writer's mark while appends go on into the page cache; only then
does it *publish*: ``acked_seq`` moves up, waiting appenders and in-process readers are
woken, and the ``head`` file is rewritten for readers in other processes.
``EVERY_RECORD`` syncs in ``append`` itself; ``NONE`` publishes right after the write.
Invariants: a record is visible to readers only once acknowledged; acknowledgement is
monotone and moves only at transaction ends; a segment is rolled only at a transaction
boundary and sealed (index, footer, fsync) before the next one is created, so at most the
newest segment lacks a footer. Lock order: the writer's ``alock`` before its ``wlock``
before the published lock (nothing sleeps or syncs under the last).

Cross-process readers open the directory with ``read_only=True``: they take no lock, change
no file, and trust only what ``head`` says is acknowledged (catalog.py): CRCs alone cannot
tell an acknowledged record from a written but not yet synced one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from headwater.errors import CorruptRecordError, StoreError
from headwater.position import Position
from headwater.store import bulk
from headwater.store._fs import fsync_dir
from headwater.store.catalog import HEAD_NAME, Catalog, lock_dir, write_head
from headwater.store.cursor import EARLIEST, AtSeq, LogReader, Start
from headwater.store.flusher import Flusher
from headwater.store.index import GtidSummary, merge_summaries
from headwater.store.logread import ReadSide
from headwater.store.maintenance import Maintenance
from headwater.store.options import Durability, StoreOptions
from headwater.store.published import Published
from headwater.store.record import Record
from headwater.store.segment import SegmentMeta
from headwater.store.writer import Writer

__all__ = ["ChangeLog", "LogInfo"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogInfo:
    """Where one record sits: its seq, position, commit time and GTID."""

    seq: int
    position: Position
    ts_us: int
    gtid: str


class ChangeLog:
    """A change log directory. Create with :meth:`open`; close with :meth:`close`."""

    def __init__(self, directory: str, options: StoreOptions, read_only: bool) -> None:
        self._dir = os.path.abspath(directory)
        self._opts = options
        self._read_only = read_only
        self._pub = Published(self._dir)
        self._catalog = Catalog(self._dir, options.index_interval_bytes, read_only=read_only)
        self._maint = Maintenance(
            self._dir, options, self._catalog, self._pub.lock, self._check_writable
        )
        self._writer: Writer | None = None
        self._flusher: Flusher | None = None
        self._lock_fd = -1
        self.read_side = ReadSide(self._pub, self._catalog, self._maint, None)

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
            self.read_side.open_head()
        else:
            self._open_writer()
        self._maint.load_purged()
        return self

    def _open_writer(self) -> None:
        os.makedirs(self._dir, exist_ok=True)
        self._lock_fd = lock_dir(self._dir)
        pub = self._pub
        try:
            act = self._catalog.recover()
            self._writer = Writer(self._opts, pub, self._catalog, act)
            pub.acked = act.last_seq
            pub.base, pub.end = act.base, act.size
            pub.head_fd = os.open(os.path.join(self._dir, HEAD_NAME), os.O_RDWR | os.O_CREAT, 0o644)
            write_head(pub.head_fd, act.base, act.size, act.last_seq)
            fsync_dir(self._dir)
        except BaseException:
            if self._writer is not None:
                self._writer.segs.close()
            os.close(self._lock_fd)
            raise
        self.read_side = ReadSide(pub, self._catalog, self._maint, self._writer)
        self._flusher = Flusher(self._writer)
        self._flusher.start()
        self._maint.start()

    def close(self) -> None:
        """Flush and acknowledge everything appended, then release files and the lock."""
        pub = self._pub
        if pub.closed:
            return
        if self._writer is None:
            pub.closed = True
            os.close(pub.head_fd)
            self.read_side.close()
            return
        self._maint.stop()
        try:
            if pub.failed is None:
                self.flush()
        finally:
            with pub.lock:
                pub.closed = True
                pub.flush_cond.notify_all()
                pub.cond.notify_all()
            if self._flusher is not None:
                self._flusher.join()
            self._writer.segs.close()
            for fd in (pub.head_fd, self._lock_fd):
                os.close(fd)

    def __enter__(self) -> ChangeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._pub.closed

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def acked_seq(self) -> int:
        """Seq of the last acknowledged (durable per policy, visible) record; 0 if none."""
        return self._pub.acked

    @property
    def problems(self) -> list[CorruptRecordError]:
        """Damage found and worked around (segments set aside, indexes rebuilt)."""
        return list(self._catalog.problems)

    # --- appending -------------------------------------------------------------------------

    def _w(self) -> Writer:
        if self._writer is None:
            raise StoreError(f"{self._dir}: opened read-only")
        return self._writer

    def append(self, record: Record, timeout: float | None = None) -> int:
        """Append and wait until acknowledged; returns the record's seq (also set on it).

        A non-final chunk of a chunked transaction is not waited for: the transaction is
        acknowledged with its last chunk. Raises StoreError if the log failed or
        ``timeout`` passed first.
        """
        seq = self.append_nowait(record)
        if record.flags & 2:
            durability = self._opts.durability
            w = self._w()
            if durability is Durability.EVERY_RECORD:
                w.sync_now()
            elif durability is Durability.NONE:
                with w.alock:
                    w.write_out()
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
        return self._w().append_many(records)

    def append_frames(self, frames: memoryview, gtids: list[str] | None = None) -> int:
        """Append whole-transaction frames (seq and CRC 0) in order; returns the last seq.
        ``gtids``: their GTID strings, if at hand (else the few the index needs as
        strings are read from the frames). Does not wait: see ``wait_acked``. ``frames``
        must stay unchanged while the log holds it (memory tail, write buffer): the
        caller can tell by the view's export of the underlying buffer."""
        return bulk.append_frames(self._w(), frames, gtids)

    @property
    def next_seq(self) -> int:
        """The seq the next record appended will get (frames built with it need no
        stamping: ``headwater._native.Scanner.scan``'s ``seq0``)."""
        return self._w().next_seq

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
        pub, w = self._pub, self._w()
        with pub.cond:
            if pub.acked < seq:
                w.waiters += 1
                pub.flush_cond.notify()
                try:
                    ok = pub.cond.wait_for(
                        lambda: pub.acked >= seq or pub.failed is not None or pub.closed,
                        timeout,
                    )
                finally:
                    w.waiters -= 1
            else:
                ok = True
            if pub.failed is not None:
                raise StoreError(f"{self._dir}: the log failed: {pub.failed}")
            return ok and pub.acked >= seq

    def flush(self) -> None:
        """Write and sync everything appended so far (even under ``NONE``), acknowledging it."""
        self._check_writable()
        self._w().sync_now()

    def _check_writable(self) -> None:
        self._pub.check_writable(self._read_only)

    # --- maintenance -----------------------------------------------------------------------

    def apply_retention(self, now_us: int | None = None) -> list[str]:
        """Delete whole sealed segments beyond the retention age or size; return their paths."""
        return self._maint.apply_retention(now_us)

    def compress_sealed(self, now_us: int | None = None) -> list[str]:
        """zstd-compress sealed segments older than ``compress_after_s``; return new paths."""
        return self._maint.compress_sealed(now_us)

    def verify(self) -> list[CorruptRecordError]:
        """Read every retained record and check it; return the damage found (no repair)."""
        return self.read_side.verify()

    # --- reading ---------------------------------------------------------------------------

    def reader(self, start: Start = EARLIEST) -> LogReader:
        """An iterator over acknowledged records from ``start`` (see cursor.py)."""
        if self._read_only:
            self.read_side.refresh()
        return LogReader(self, start)

    def earliest(self) -> LogInfo | None:
        """The first retained record, or None if the log is empty."""
        with self.reader(EARLIEST) as r:
            rec = r.next(0)
        return None if rec is None else LogInfo(rec.seq, rec.position, rec.ts_us, rec.gtid)

    def latest(self) -> LogInfo | None:
        """The last acknowledged record, or None if the log is empty."""
        if self._read_only:
            self.read_side.refresh()
        seq = self._pub.acked
        if seq < self._catalog.earliest_seq():
            return None
        with self.reader(AtSeq(seq)) as r:
            rec = r.next(0)
        return None if rec is None else LogInfo(rec.seq, rec.position, rec.ts_us, rec.gtid)

    def sealed_gtid_summary(self) -> GtidSummary:
        """Per GTID key the (lowest, highest) number in the sealed segments and in those
        retention removed; None if some record there had no parseable GTID."""
        summary = self._maint.purged
        for meta in self._catalog.segments:
            if meta.footer is not None:
                summary = merge_summaries(summary, meta.footer.summary)
        return summary

    def active_base(self) -> int:
        """The seq the newest segment (the only one that may lack a footer) begins at."""
        segs = self._catalog.segments
        return segs[-1].base if segs else self._pub.acked + 1

    def segments(self) -> list[SegmentMeta]:
        """The segments as the top-level index sees them (oldest first)."""
        return list(self._catalog.segments)
