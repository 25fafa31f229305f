"""The compiled ingest path, driven on behalf of the grouper.

:class:`NativeIngest` owns the C scanner (:class:`headwater._native.Scanner`, whose
statuses and bounds ``headwater._native`` describes) and what only it needs: the TABLE_MAP
shapes registered with it, the mask of dropped rows event types, the pool of frame
buffers and the count of transactions it stored. The grouper (``headwater.reader.grouping``)
holds one as ``Grouper.native`` and offers it the dump's receive buffer through
``Grouper.native_scan``; this module knows nothing of the grouper but the callback that
shows it a new shape (one direction of imports: grouping -> native -> committed).

When the compiled path applies, and when Python takes over:

* it exists only if the sink takes frames (``ChangeLog.append_frames``) and
  ``HEADWATER_NATIVE`` is not ``0`` in the environment (:func:`native_ingest`); otherwise
  ``Grouper.native`` is None and every event goes through ``Grouper.feed``;
* it runs only on a MariaDB stream (per its FORMAT_DESCRIPTION) and at a transaction
  boundary, with no transaction under way in the grouper (``Grouper.native_scan`` checks,
  else answers SLOW and resets the scanner);
* it takes the transactions ``MARIADB_GTID [ANNOTATE_ROWS | TABLE_MAP | rows]* XID`` whose
  TABLE_MAP shapes are registered. A shape is registered the first time the grouper sees
  it (kept by the filters, not the watched heartbeat table, every column's value width
  known: :meth:`NativeIngest.register`); at an unknown shape the scanner stops (SHAPE), the
  grouper is shown it (``learn``) and the scan goes on if it is now registered, else the
  transaction is handed back (SLOW). DDL, QUERY-framed transactions, filtered tables,
  chunked transactions and transactions the resume checks may skip (at or before
  ``after``, GTID not above ``gtid_floor``) all go to ``Grouper.feed``, event by event;
* registered shapes are forgotten with the grouper's shape table: a FORMAT_DESCRIPTION
  with another table id size (:meth:`NativeIngest.restart`), more than 10,000 shapes
  (:meth:`NativeIngest.forget_shapes`).

Invariants:

* the records are those ``Grouper.feed`` would build, byte for byte (position, payload,
  time, GTID, table counts, schema version, flags, chunk number, seq), and the same
  transaction ends are reported: tests/unit/reader/test_native_differential.py checks it
  on fixtures and generated streams, tests/integration/test_reader_native.py on a live
  server;
* record order holds: the grouper appends its pending records before any frame, and the
  scanner numbers frames from the sink's ``next_seq``;
* a run of stored transactions is reported as one :class:`Committed`, its last
  transaction's, ``transactions`` counting them (all stored, none DDL or watched);
* a frame buffer is reused only once nothing points into it (the store's memory tail and
  write buffer hold views of the ones in use).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from typing import Protocol, cast

from headwater._native import SHAPE, SLOW, Scanner
from headwater.binlog._columns import value_width
from headwater.binlog.codec import row_decoder_for
from headwater.binlog.tablemap import TableMap
from headwater.errors import BinlogFormatError
from headwater.position import MariadbGtid, Position
from headwater.reader.committed import Committed

__all__ = ["FrameSink", "Learn", "NativeIngest", "native_ingest"]

#: frame buffers kept for reuse (about 4 MiB each, NativeIngest._out_buffer): enough to
#: cycle past the store's memory tail (32 MiB by default) without pinning much more
_OUT_POOL = 16

#: ``learn(shape, txn_offset) -> schema version``: show the grouper a TABLE_MAP body the
#: scanner stopped at (``txn_offset``: where its transaction starts); the schema version
#: records take from there (the schema history's cross-check of a new shape may move it)
Learn = Callable[[bytes, int], int]


class FrameSink(Protocol):
    """A sink that takes the scanner's frames (``ChangeLog``): returns the last seq."""

    def append_frames(self, frames: memoryview, gtids: list[str] | None = None) -> int: ...

    @property
    def next_seq(self) -> int: ...


def native_ingest(
    sink: object, dropped_rows: Collection[int], chunk_bytes: int
) -> NativeIngest | None:
    """The compiled path for a grouper appending to ``sink``; None if the sink cannot take
    frames or ``HEADWATER_NATIVE=0`` turns it off (the Python path then does it all)."""
    if not hasattr(sink, "append_frames") or os.environ.get("HEADWATER_NATIVE") == "0":
        return None
    return NativeIngest(cast(FrameSink, sink), dropped_rows, chunk_bytes)


class NativeIngest:
    """The scanner and its registered shapes (see the module docstring).

    ``sink``, ``chunk_bytes``: the grouper's; ``dropped_rows``: the rows event type codes
    the filters drop (the scanner drops them too); ``transactions`` counts the
    transactions the scanner stored."""

    def __init__(
        self,
        sink: FrameSink,
        dropped_rows: Collection[int],
        chunk_bytes: int,
        table_id_size: int = 6,
    ) -> None:
        self.scanner = Scanner(table_id_size)
        self.sink = sink
        self.chunk_bytes = chunk_bytes
        self.transactions = 0
        self._dropped_mask = bytes(t in dropped_rows for t in range(256))
        self._registered: set[bytes] = set()  # shapes the scanner knows
        self._outs: list[bytearray] = []  # frame buffers (_out_buffer)

    # -- the grouper's hooks -----------------------------------------------------------------

    def reset(self) -> None:
        """Drop the transaction the scanner holds part of (the grouper takes it over)."""
        self.scanner.reset()

    def restart(self, table_id_size: int) -> None:
        """A FORMAT_DESCRIPTION with another table id size: shapes are read anew."""
        self.scanner = Scanner(table_id_size)
        self._registered.clear()

    def forget_shapes(self) -> None:
        """The grouper's shape table was cleared: the scanner forgets its shapes too."""
        self.scanner.clear()
        self._registered.clear()

    def register(self, shape: bytes, name: str, tm: TableMap) -> None:
        """Let the scanner count this shape's rows: each column's value width (fixed, or
        the bytes of its length), as the generated Python counter walks them."""
        try:
            widths = [value_width(c) for c in row_decoder_for(tm).plan]
        except BinlogFormatError:
            return  # a column the counter does not frame: this shape stays with Python
        if len(widths) != tm.column_count or not all(-4 <= w <= 127 for w in widths):
            return
        self.scanner.add_shape(shape, name.encode("utf-8"), bytes(w & 0xFF for w in widths))
        self._registered.add(shape)

    # -- scanning ----------------------------------------------------------------------------

    def scan(
        self,
        buf: bytearray,
        start: int,
        end: int,
        seq: int,
        *,
        file: str,
        file_num: int,
        change_id: int,
        schema_version: int,
        checksum_size: int,
        crc: bool,
        verify: bool,
        after: tuple[int, int] | None,
        gtid_floor: tuple[int, int] | None,
        max_out: int,
        learn: Learn,
    ) -> tuple[int, int, int, Committed | None, int]:
        """Run the scanner over ``buf[start:end]`` (packets of the dump, ``start`` a
        transaction boundary, which ``Grouper.native_scan`` checks, ``seq`` the packet
        sequence number there) and append the frames it builds, until it stops for
        something other than a new shape it can learn. Returns ``(status, stop, seq,
        committed, events)``: the scanner's status (``headwater._native`` SLOW, MORE,
        LIMIT), where it stopped and the sequence number there, the :class:`Committed` of
        the run (None if empty) and the events it held.

        ``file_num``: ``file``'s number; ``schema_version``: the grouper's, until ``learn``
        moves it; ``checksum_size``: of the stream's events; ``after``: (file number,
        offset) of the last transaction processed in this change_id, ``gtid_floor``:
        (domain, seq_no) of the GTID position (seq_no -1: none of the domain yet) or None
        (no GTIDs seen): transactions the scanner cannot tell are new are left to the
        event path, which asks ``skip``.
        """
        scanner = self.scanner
        sink = self.sink
        n = events = last_seq = 0
        last: tuple[int, int, int, int, int, int] | None = None
        while True:
            out = self._out_buffer()
            status, start, seq, size, count, got, run = scanner.scan(
                buf,
                start,
                end,
                seq,
                crc=crc,
                verify=verify,
                change_id=change_id,
                file_num=file_num,
                schema_version=schema_version,
                chunk_bytes=self.chunk_bytes,
                after_file=-1 if after is None else after[0],
                after_offset=-1 if after is None else after[1],
                gtid_domain=-1 if gtid_floor is None else gtid_floor[0],
                gtid_floor=-1 if gtid_floor is None else gtid_floor[1],
                dropped=self._dropped_mask,
                max_out=max_out,
                out=out,
                seq0=sink.next_seq,
            )
            if run is not None:
                last_seq = sink.append_frames(memoryview(out)[:size])
                n += count
                events += got
                last = run
                gtid_floor = (run[3], run[5])  # as the scan itself goes on (ingest.c)
                after = (file_num, run[0])
            if status != SHAPE:
                break
            shape = self._stopped_at(buf, start, checksum_size)
            schema_version = learn(shape, scanner.txn_offset)
            if not (scanner.in_transaction and shape in self._registered):
                scanner.reset()
                status = SLOW
                break
        if last is None:
            return status, start, seq, None, 0
        self.transactions += n
        done = _run_committed(change_id, file, file_num, last, n, last_seq)
        return status, start, seq, done, events

    def _stopped_at(self, buf: bytearray, start: int, checksum_size: int) -> bytes:
        """The body of the TABLE_MAP the scanner stopped at (SHAPE: ``start`` + its
        ``resume`` is that event's packet: 3 bytes of length, sequence number, OK byte)."""
        p = start + self.scanner.resume
        length = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
        size = length - 1 - checksum_size
        return bytes(buf[p + 5 + 19 : p + 5 + size])

    def _out_buffer(self) -> bytearray:
        """A buffer for the scanner's frames that nothing points into any more (the
        store's memory tail and write buffer hold views of the ones in use): reused, its
        pages are already mapped -- fresh memory costs a page fault per 4 KiB."""
        pool = self._outs
        for buf in pool:
            if not buf:
                return buf
            try:
                last = buf.pop()  # fails while a view of it is alive (never reallocates)
            except BufferError:
                continue
            buf.append(last)
            return buf
        buf = bytearray()
        if len(pool) < _OUT_POOL:
            pool.append(buf)
        return buf


def _run_committed(
    change_id: int,
    file: str,
    file_num: int,
    last: tuple[int, int, int, int, int, int],
    transactions: int,
    last_seq: int,
) -> Committed:
    """The :class:`Committed` of a run: its last transaction's, counting them all."""
    offset, log_pos, ts_s, domain, server_id, seq_no = last
    return Committed(
        Position(change_id, file_num, offset),
        f"{domain}-{server_id}-{seq_no}",
        MariadbGtid(domain, server_id, seq_no),
        ts_s * 1_000_000,
        True,
        last_seq,
        transactions,
        file,
        log_pos,
        False,
        transactions=transactions,
    )
